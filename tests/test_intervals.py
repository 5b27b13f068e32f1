"""report.intervals: intervals valid for their sample size, and tests against random controls, on known cases."""

import math

import numpy as np
import pytest
from scipy import stats

from dlmlab.report.claims import (REPRODUCED, combine, effect_excluded, interval_verdict, learned, learned_level,
                                  short_of_scale, underpowered, verdict_from_control, verdict_from_interval)
from dlmlab.report.intervals import (MIN_BOOTSTRAP_N, MIN_CONTROL_DRAWS, bootstrap_ci, control_test,
                                     hierarchical_ci, mean_ci, paired_diff_ci)


def test_constant_values_give_a_point_interval():
    ci = mean_ci([0.25, 0.25, 0.25])
    assert (ci.mean, ci.lo, ci.hi, ci.n, ci.method) == (0.25, 0.25, 0.25, 3, "t")


def test_three_seeds_t_interval_by_hand():
    # mean 0.4, sd 0.3, se 0.3 / sqrt(3); t(0.975, 2) = 4.302653
    ci = mean_ci([0.1, 0.4, 0.7])
    half = 4.302652729911275 * 0.3 / math.sqrt(3)
    assert ci.mean == pytest.approx(0.4)
    assert (ci.lo, ci.hi) == (pytest.approx(0.4 - half), pytest.approx(0.4 + half))
    assert ci.lo < 0.1 and ci.hi > 0.7  # wider than [min, max], which a 3-value bootstrap would return
    assert ci.fmt().endswith("(n=3 seeds, t)")


def test_t_interval_coverage_with_three_seeds_is_95_percent():
    # known case: normal values, the interval covers the true mean 95% of the time even with n = 3;
    # the old percentile bootstrap ([min, max] at n = 3) covered 1 - 2 * (1/2)^3 = 75%
    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 2.0, size=(4000, 3))
    cover = np.mean([(iv.lo <= 1.0 <= iv.hi) for iv in map(mean_ci, x)])
    assert 0.94 < cover < 0.96
    minmax = np.mean((x.min(1) <= 1.0) & (1.0 <= x.max(1)))
    assert 0.73 < minmax < 0.77


def test_one_value_has_no_interval():
    iv = mean_ci([0.3])
    assert iv.mean == 0.3 and math.isnan(iv.lo) and iv.method == "none" and iv.n == 1
    assert interval_verdict(iv).reason == "underpowered"
    assert math.isnan(mean_ci([float("nan")]).mean) and mean_ci([]).n == 0


def test_paired_difference_pairs_by_index():
    mdm, arm = [0.40, 0.50, 0.45], [0.15, 0.20, 0.17]
    d = paired_diff_ci(mdm, arm)
    diff = np.subtract(mdm, arm)
    ref = stats.t.interval(0.95, 2, loc=diff.mean(), scale=stats.sem(diff))
    assert d.mean == pytest.approx(diff.mean()) and (d.lo, d.hi) == pytest.approx(ref)
    assert d.excludes_zero()
    mixed = paired_diff_ci([0.4, 0.1, 0.45], [0.15, 0.2, 0.17])
    assert mixed.lo < 0 < mixed.hi and not mixed.excludes_zero()
    assert d.as_dict()["n"] == 3 and d.as_dict()["method"] == "t"
    with pytest.raises(ValueError, match="equal shapes"):
        paired_diff_ci([1.0, 2.0], [1.0])


def test_bootstrap_refuses_small_samples_and_matches_normal_theory_on_large_ones():
    with pytest.raises(ValueError, match="mean_ci"):
        bootstrap_ci([0.1, 0.4, 0.7])
    with pytest.raises(ValueError, match="level"):
        mean_ci([1.0, 2.0], level=1.5)
    x = np.random.default_rng(1).normal(2.0, 1.0, size=400)
    ci = bootstrap_ci(x)
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))
    assert ci.lo < x.mean() < ci.hi and ci.hi - ci.lo == pytest.approx(2 * half, rel=0.1)
    assert bootstrap_ci(x) == ci and ci.method == "bootstrap"
    assert MIN_BOOTSTRAP_N >= 20


def test_hierarchical_interval_is_a_t_interval_over_seed_means():
    same = np.full((3, 10), -0.5)
    iv = hierarchical_ci(same)
    assert (iv.mean, iv.lo, iv.hi, iv.n) == (-0.5, -0.5, -0.5, 3)
    seeds_apart = np.array([[-1.0] * 40, [-1.0] * 40, [2.0] * 40])
    iv = hierarchical_ci(seeds_apart)
    assert iv == mean_ci([-1.0, -1.0, 2.0]) and not iv.excludes_zero()
    one_seed = np.array([[0.1, 0.2, 0.3, 0.4]])
    iv = hierarchical_ci(one_seed)
    assert iv.method == "t-items" and iv.unit == "items" and iv.n == 4
    with pytest.raises(ValueError):
        hierarchical_ci(np.array([1.0, 2.0]))


def test_control_test_permutation_p_value():
    draws = np.arange(200, dtype=float)  # 0 .. 199
    t = control_test(250.0, draws)
    assert t.p == pytest.approx(1 / 201) and t.n == 200
    t = control_test(190.0, draws)  # draws >= 190: 10 of them
    assert t.p == pytest.approx(11 / 201)
    assert t.p95 == pytest.approx(np.percentile(draws, 95)) and t.median == pytest.approx(99.5)
    low = control_test(-5.0, draws, side=-1)
    assert low.p == pytest.approx(1 / 201) and low.p95 == pytest.approx(np.percentile(draws, 5))
    with pytest.raises(ValueError, match=f">= {MIN_CONTROL_DRAWS} draws"):
        control_test(1.0, draws[:20])
    # under the null (value drawn like the control) the p-value is uniform: P(p <= 0.05) ~ 0.05
    rng = np.random.default_rng(0)
    ps = [control_test(rng.normal(), rng.normal(size=200)).p for _ in range(2000)]
    assert 0.035 < np.mean(np.array(ps) <= 0.05) < 0.065


def test_verdict_from_control():
    draws = np.arange(200, dtype=float)
    assert verdict_from_control(control_test(250.0, draws)) == REPRODUCED
    assert verdict_from_control(control_test(150.0, draws)).reason == "underpowered"
    assert verdict_from_control(control_test(50.0, draws)).verdict == "contradicted"
    # a measure nothing moves (e.g. one token per step under every direction) cannot be judged
    flat = control_test(1.0, np.ones(200))
    assert flat.degenerate() and verdict_from_control(flat).reason == "precondition"
    assert not control_test(1.0, np.r_[np.ones(199), 2.0]).degenerate()


def test_study_effect_separates_underpowered_from_effect_excluded():
    # PreDiff's case: hybrid - uniform spans 0 but the study reports 0.17 nats better (side -1: lower is better)
    j = verdict_from_interval(-0.004, 0.006, side=-1, study_effect=-0.17, what="hybrid - uniform")
    assert j.verdict == "inconclusive" and j.reason == "effect_excluded" and "0.17" in j.detail
    assert verdict_from_interval(-0.3, 0.05, side=-1, study_effect=-0.17).reason == "underpowered"
    assert verdict_from_interval(-0.3, -0.01, side=-1, study_effect=-0.17) == REPRODUCED
    assert verdict_from_interval(0.01, 0.3, side=-1, study_effect=-0.17).verdict == "contradicted"
    iv = mean_ci([0.1, -0.1, 0.05])
    assert interval_verdict(iv, study_effect=2.0).reason == "effect_excluded" and "n=3" in \
        interval_verdict(iv, study_effect=2.0).detail


def test_learned_level_and_combine_order():
    assert learned_level(0.5) == pytest.approx(0.95) and learned_level(0.0, 0.5) == 0.5
    assert learned(0.96, 0.5) is None
    pre = learned(0.6, 0.5, "S3")
    assert pre.reason == "precondition" and "0.600" in pre.detail and "0.950" in pre.detail
    with pytest.raises(ValueError):
        learned_level(1.0)
    assert combine([REPRODUCED, short_of_scale("x"), underpowered("y")]).reason == "scale"
    assert combine([effect_excluded("e"), short_of_scale("x")]).reason == "effect_excluded"
    assert combine([pre, effect_excluded("e")]).reason == "precondition"


def test_a_bounded_quantity_is_clipped_to_its_range_and_says_so():
    from dlmlab.report.intervals import clip, hierarchical_ci, mean_ci

    acc = [1.0, 0.98, 0.9]
    raw = mean_ci(acc)
    assert raw.hi > 1  # a t-interval of accuracies near 1 runs past 1
    iv = mean_ci(acc, bounds=(0, 1))
    assert (iv.mean, iv.lo, iv.hi) == (raw.mean, raw.lo, 1.0) and iv.method == "t, clipped to [0, 1]"
    assert iv.fmt().endswith("(n=3 seeds, t, clipped to [0, 1])")
    assert mean_ci([0.4, 0.5, 0.6], bounds=(0, 1)) == mean_ci([0.4, 0.5, 0.6])  # inside: unchanged
    one = hierarchical_ci([[0.0, 0.0, 0.1, 0.0]], bounds=(0, 1))
    assert one.lo == 0.0 and one.method == "t-items, clipped to [0, 1]"
    with pytest.raises(ValueError, match="low < high"):
        clip(raw, (1, 0))
