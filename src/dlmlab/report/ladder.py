"""Scale ladders: a statistic measured at several model sizes, with its interval at each size and a trend.

A study's ``ladder`` preset trains the same recipe at 3-4 sizes and measures the statistics that only
scale can settle.  For each statistic this module gives

* the per-size Student-t interval over seeds (:func:`~dlmlab.report.intervals.mean_ci`);
* the trend, with a Welch t-interval of a difference between the largest and the smallest size (issue 34:
  toward the study's value, not the claim's level):

  - with a study value: the shrinking of the distance to it, ``|small - study| - |large - study|`` per seed.
    ``toward the study with scale`` when the interval lies above 0, ``away`` when below; when it spans 0,
    ``flat`` only if it is narrow enough to exclude closing the whole gap (its upper end below the smallest
    size's mean distance), else ``undetermined``;
  - without one: the growth of the effect on the claim's side, ``side * (value - level)``: ``toward`` above 0,
    ``away`` below, ``undetermined`` when it spans 0 (there is no study value a narrow interval could exclude);
  - ``undetermined`` with fewer than two seeds at either end.
* one table row per statistic (:func:`ladder_table`) and one figure panel per statistic (:func:`ladder_figure`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy import stats

from dlmlab.report.intervals import LEVEL, Interval, mean_ci
from dlmlab.report.results import Table

TOWARD, AWAY, FLAT, UNDETERMINED = "toward the study with scale", "away from the study with scale", "flat", \
    "undetermined"


@dataclass
class LadderStat:
    """One statistic over sizes: ``values[size]`` = per-seed values [n_seeds] at that size (a size is any
    number that orders the models, e.g. parameters or width); ``side`` +1 when the study expects the value
    above ``level`` (-1: below); ``study_value``: the study's reported value, if any (drawn as a line)."""

    name: str
    values: dict[float, list[float]]
    side: int = 1
    level: float = 0.0
    study_value: float | None = None
    size_label: str = "parameters"
    per_size: dict[float, Interval] = field(init=False)

    def __post_init__(self):
        if self.side not in (1, -1):
            raise ValueError(f"side must be +1 or -1, got {self.side}")
        if len(self.values) < 2:
            raise ValueError(f"a ladder needs >= 2 sizes, got {len(self.values)} for {self.name!r}")
        self.values = {float(k): [float(x) for x in v] for k, v in sorted(self.values.items())}
        self.per_size = {k: mean_ci(v) for k, v in self.values.items()}


@dataclass(frozen=True)
class Trend:
    """Largest minus smallest size of the on-side effect: ``diff`` [lo, hi] (Welch t, ``level``) and its label."""

    label: str
    mean: float
    lo: float
    hi: float

    def as_dict(self) -> dict:
        return {"label": self.label, "mean": self.mean, "lo": self.lo, "hi": self.hi}


def welch_diff(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its Welch t-interval (unpaired, unequal variances); NaN ends when either has
    fewer than two finite values."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return float("nan"), float("nan"), float("nan")
    d = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return d, float("nan"), float("nan")
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d
    dof = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    return d, d - half, d + half


def trend(stat: LadderStat, level: float = LEVEL) -> Trend:
    """The trend of ``stat`` from its smallest to its largest size (see the module docstring)."""
    sizes = sorted(stat.values)
    lo_vals, hi_vals = stat.values[sizes[0]], stat.values[sizes[-1]]
    if stat.study_value is not None:
        small = [abs(x - stat.study_value) for x in lo_vals]
        large = [abs(x - stat.study_value) for x in hi_vals]
        d, lo, hi = welch_diff(small, large, level)  # > 0: closer to the study at the largest size
        gap = float(np.mean([x for x in small if math.isfinite(x)])) if any(map(math.isfinite, small)) else math.nan
    else:
        small = [stat.side * (x - stat.level) for x in lo_vals]
        large = [stat.side * (x - stat.level) for x in hi_vals]
        d, lo, hi = welch_diff(large, small, level)
        gap = math.nan
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Trend(UNDETERMINED, d, lo, hi)
    if lo > 0 or hi < 0:
        return Trend(TOWARD if lo > 0 else AWAY, d, lo, hi)
    return Trend(FLAT if math.isfinite(gap) and hi < gap else UNDETERMINED, d, lo, hi)


def ladder_table(stats_: Sequence[LadderStat], title: str = "Scale ladder") -> Table:
    """One row per statistic: the per-size mean [95% t-interval] (n seeds), the study's value and the trend."""
    sizes = sorted({s for st in stats_ for s in st.values})
    cols = ["statistic", *[f"{_fmt_size(s)}" for s in sizes], "study", "trend (largest vs smallest size)"]
    rows = []
    for st in stats_:
        t = trend(st)
        cells = [st.per_size[s].fmt() if s in st.per_size else "-" for s in sizes]
        study = "-" if st.study_value is None else f"{st.study_value:.3g}"
        rows.append([st.name, *cells, study, f"{t.label}: {t.mean:+.3g} [{t.lo:.3g}, {t.hi:.3g}]"])
    return Table(title, cols, rows, note="Each cell: mean [Student-t 95% interval] (n seeds) at that size.  The trend "
                 "is a Welch t-interval: where the study gives a value, of how much closer to it the largest size is "
                 "than the smallest (flat only when the interval excludes closing the whole gap); elsewhere, of the "
                 "largest size's effect on the claim's side minus the smallest's (undetermined when it spans 0).")


def ladder_figure(stats_: Sequence[LadderStat], out_dir: str | Path, name: str = "ladder",
                  caption: str = "Statistics over model size (mean and 95% t-interval over seeds)") -> dict:
    """One panel per statistic: mean and interval over sizes (log x), the claim's level dashed, the study's
    value dotted; returns :func:`dlmlab.report.figures.save_figure`'s record."""
    from dlmlab.report.figures import new_figure, save_figure

    n = len(stats_)
    fig, axes = new_figure(ncols=n, width=3.4, height=3.0)
    axes = np.asarray(axes).ravel()
    for ax, st in zip(axes, stats_):
        xs = sorted(st.per_size)
        m = np.array([st.per_size[x].mean for x in xs])
        lo = np.array([st.per_size[x].lo for x in xs])
        hi = np.array([st.per_size[x].hi for x in xs])
        ax.plot(xs, m, "o-", color="C0")
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            ax.fill_between(np.array(xs)[ok], lo[ok], hi[ok], color="C0", alpha=0.2)
        ax.axhline(st.level, color="grey", ls="--", lw=1)
        if st.study_value is not None:
            ax.axhline(st.study_value, color="C3", ls=":", lw=1.2, label="study")
            ax.legend(fontsize=7)
        if not np.isfinite(m).any():  # nothing measured at any size (e.g. no seed learned): say so, no log axis
            ax.text(0.5, 0.5, "no finite value at any size", ha="center", va="center", transform=ax.transAxes,
                    fontsize=8)
        else:
            ax.set_xscale("log")
        ax.set_xlabel(st.size_label)
        ax.set_title(f"{st.name}\n{trend(st).label}", fontsize=8)
    return save_figure(fig, out_dir, name, caption)


def _fmt_size(s: float) -> str:
    return f"{int(s):,}" if float(s).is_integer() else f"{s:g}"
