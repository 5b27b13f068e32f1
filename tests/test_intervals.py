"""report.intervals: percentile-bootstrap intervals of a mean and of paired differences, on hand-made values."""

import math

import numpy as np
import pytest

from dlmlab.report.intervals import bootstrap_ci, paired_diff_ci


def test_constant_values_give_a_point_interval():
    ci = bootstrap_ci([0.25, 0.25, 0.25])
    assert (ci.mean, ci.lo, ci.hi, ci.n) == (0.25, 0.25, 0.25, 3)


def test_three_seeds_interval_spans_min_to_max_and_is_deterministic():
    # with 3 values each resample of one value three times has probability 1/27 > 2.5%, so the 95%
    # percentile interval is exactly [min, max] of the values
    ci = bootstrap_ci([0.1, 0.4, 0.7])
    assert ci.mean == pytest.approx(0.4) and (ci.lo, ci.hi) == (pytest.approx(0.1), pytest.approx(0.7))
    assert bootstrap_ci([0.1, 0.4, 0.7]) == ci  # fixed generator seed: the same on every call and machine


def test_many_values_interval_matches_the_normal_approximation():
    x = np.random.default_rng(1).normal(2.0, 1.0, size=400)
    ci = bootstrap_ci(x)
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))
    assert ci.lo < x.mean() < ci.hi
    assert ci.hi - ci.lo == pytest.approx(2 * half, rel=0.1)


def test_paired_difference_pairs_by_index():
    mdm, arm = [0.40, 0.50, 0.45], [0.15, 0.20, 0.17]
    d = paired_diff_ci(mdm, arm)
    assert d.mean == pytest.approx(np.mean(np.subtract(mdm, arm)))
    assert d.lo == pytest.approx(0.25) and d.hi == pytest.approx(0.30) and d.excludes_zero()
    # large seed-to-seed spread but the same sign in every pair: pairing keeps the interval above 0
    assert paired_diff_ci([0.9, 0.2, 0.5], [0.8, 0.1, 0.4]).lo == pytest.approx(0.1)
    # one pair of the other sign: the interval reaches below 0
    mixed = paired_diff_ci([0.4, 0.1, 0.45], [0.15, 0.2, 0.17])
    assert mixed.lo < 0 < mixed.hi and not mixed.excludes_zero()
    assert d.as_dict() == {"mean": d.mean, "lo": d.lo, "hi": d.hi, "n": 3} and d.fmt().startswith("0.277 [0.250")


def test_bad_input():
    with pytest.raises(ValueError, match="equal shapes"):
        paired_diff_ci([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci([1.0, 2.0], level=1.5)
    assert math.isnan(bootstrap_ci([float("nan")]).mean) and bootstrap_ci([]).n == 0


def test_hierarchical_ci_resamples_seeds_then_items():
    from dlmlab.report.intervals import hierarchical_ci

    same = np.full((3, 10), -0.5)
    iv = hierarchical_ci(same)
    assert (iv.mean, iv.lo, iv.hi, iv.n) == (-0.5, -0.5, -0.5, 3)
    # every item agrees within a seed, but the seeds disagree: only the seed level can widen the interval
    seeds_apart = np.array([[-1.0] * 40, [-1.0] * 40, [2.0] * 40])
    iv = hierarchical_ci(seeds_apart)
    assert iv.lo == -1.0 and iv.hi == 2.0 and not iv.excludes_zero()
    assert hierarchical_ci(seeds_apart, seed=1) == hierarchical_ci(seeds_apart, seed=1)
    with pytest.raises(ValueError):
        hierarchical_ci(np.array([1.0, 2.0]))
