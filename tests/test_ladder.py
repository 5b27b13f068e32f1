"""report.ladder: per-size intervals, the trend over sizes (Welch t), its table and figure."""

import numpy as np
import pytest
from scipy import stats

from dlmlab.report.ladder import AWAY, FLAT, TOWARD, UNDETERMINED, LadderStat, ladder_figure, ladder_table, trend, \
    welch_diff


def test_welch_difference_matches_scipy():
    a, b = [1.0, 1.2, 0.9, 1.4], [0.2, 0.5, 0.1]
    d, lo, hi = welch_diff(a, b)
    r = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert d == pytest.approx(np.mean(a) - np.mean(b)) and (lo, hi) == pytest.approx((r.low, r.high))


def test_trend_labels_follow_the_claims_side():
    up = {1e3: [0.1, 0.12, 0.09], 1e4: [0.3, 0.31, 0.29], 1e5: [0.6, 0.62, 0.61]}
    assert trend(LadderStat("r2", up)).label == TOWARD
    assert trend(LadderStat("r2", up, side=-1)).label == AWAY  # the study expects it low
    noisy = {1e3: [0.1, 0.5, -0.3], 1e5: [0.2, -0.4, 0.6]}
    assert trend(LadderStat("x", noisy)).label == UNDETERMINED  # spans 0, and no study value it could exclude


def test_trend_moves_toward_the_studys_value_and_is_flat_only_when_it_excludes_reaching_it():
    # the study's value 0.9: the claim's level (0) is irrelevant; 0.1 -> 0.6 closes the distance
    up = {1e3: [0.1, 0.12, 0.09], 1e5: [0.6, 0.62, 0.61]}
    t = trend(LadderStat("r2", up, study_value=0.9))
    assert t.label == TOWARD and t.mean == pytest.approx(np.mean([0.8, 0.78, 0.81]) - np.mean([0.3, 0.28, 0.29]))
    # moving past the level but away from the study's value
    assert trend(LadderStat("r2", {1: [0.8, 0.81, 0.79], 2: [0.2, 0.21, 0.19]}, study_value=0.9)).label == AWAY
    # a tight interval around no change, far from the study: flat (closing the 0.8 gap is excluded)
    tight = {1: [0.1, 0.11, 0.09, 0.1], 2: [0.1, 0.12, 0.08, 0.1]}
    assert trend(LadderStat("r2", tight, study_value=0.9)).label == FLAT
    # a wide interval that could still reach the study: undetermined, never "flat"
    wide = {1: [0.1, 0.5, -0.3], 2: [0.2, -0.4, 0.9]}
    assert trend(LadderStat("r2", wide, study_value=0.9)).label == UNDETERMINED
    assert trend(LadderStat("x", {1: [0.1], 2: [0.3]})).label == UNDETERMINED
    with pytest.raises(ValueError, match=">= 2 sizes"):
        LadderStat("x", {1: [0.1, 0.2]})


def test_table_and_figure(tmp_path):
    st = [LadderStat("probe r2", {1e3: [0.1, 0.12, 0.09], 1e4: [0.3, 0.31, 0.29]}, study_value=0.9),
          LadderStat("additivity", {1e3: [0.5, 0.4, 0.6], 1e4: [0.7, 0.6, 0.8]}, level=0.5)]
    t = ladder_table(st)
    assert t.columns[1:3] == ["1,000", "10,000"] and len(t.rows) == 2
    assert t.rows[0][1].endswith("(n=3 seeds, t)") and t.rows[0][3] == "0.9" and t.rows[0][4].startswith(TOWARD)
    assert t.rows[1][4].startswith(UNDETERMINED) and t.columns[-1] == "trend (largest vs smallest size)"
    fig = ladder_figure(st, tmp_path)
    assert (tmp_path / fig["path"]).stat().st_size > 1000


def test_a_statistic_with_no_finite_value_still_draws(tmp_path):
    """A ladder row whose quantity is NaN at every size (no seed learned) gets a labelled empty panel, not a
    log-axis error."""
    nan = float("nan")
    st = [LadderStat("cosine after learning", {32: [nan, nan], 64: [nan, nan]}, study_value=0.6),
          LadderStat("acc", {32: [0.1, 0.2], 64: [0.3, 0.4]})]
    fig = ladder_figure(st, tmp_path, "empty")
    assert (tmp_path / fig["path"]).stat().st_size > 1000 and trend(st[0]).label == UNDETERMINED
