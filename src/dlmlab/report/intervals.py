"""Intervals that are valid for the number of seeds they rest on, and tests against random controls.

* :func:`mean_ci` — the Student-t interval of a mean over ``n`` independent values (training seeds, paired
  rounds).  It is exact for normal values and is the usual choice for a handful of seeds: with three seeds
  it multiplies the standard error by t(0.975, 2) = 4.30, where a percentile bootstrap would return
  [min, max] of the three values (whose coverage is only 1 - 2 * (1/2)^3 = 75%).
* :func:`paired_diff_ci` — :func:`mean_ci` of paired differences (the same seed / round in both arms).
* :func:`hierarchical_ci` — the interval of a mean over ``[seeds, items]``: a t-interval across the seed
  means (the seed is the unit that repeats the experiment), or, with one seed, across the items (the
  interval then carries evaluation noise only, and says so in its ``method``).
* :func:`bootstrap_ci` — the percentile bootstrap, refused below :data:`MIN_BOOTSTRAP_N` values, where it
  undercovers.
* :func:`control_test` — a measured value against ``>= MIN_CONTROL_DRAWS`` draws of a random control (a
  random direction, head set or subspace): the permutation p-value ``(1 + #{draws >= value}) / (1 + n)``.

Every :class:`Interval` carries ``n`` and how it was computed, and :meth:`Interval.fmt` prints both beside
the numbers, so no interval is shown without its sample size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

N_BOOT = 10_000
LEVEL = 0.95
MIN_BOOTSTRAP_N = 20
MIN_CONTROL_DRAWS = 200


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values and its ``level`` interval [lo, hi]; ``method``: ``t`` (Student-t across the
    ``n`` units), ``t-items`` (one seed: across evaluation items), ``bootstrap`` or ``none`` (fewer than two
    values: lo / hi are NaN); ``unit``: what ``n`` counts (``seeds``, ``rounds``, ``items``)."""

    mean: float
    lo: float
    hi: float
    n: int
    method: str = "t"
    level: float = LEVEL
    unit: str = "seeds"

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0

    def excludes(self, value: float) -> bool:
        """True when ``value`` lies strictly outside [lo, hi] (False for an undefined interval)."""
        return math.isfinite(self.lo) and math.isfinite(self.hi) and (value < self.lo or value > self.hi)

    def as_dict(self) -> dict:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n, "method": self.method,
                "level": self.level, "unit": self.unit}

    def fmt(self, digits: int = 3) -> str:
        """``0.277 [0.250, 0.300] (n=3 seeds, t)``."""
        return f"{self.mean:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}] " \
               f"(n={self.n} {self.unit}, {self.method})"


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")


def _finite(values) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


def clip(iv: Interval, bounds: tuple[float, float] | None) -> Interval:
    """``iv`` with its ends clipped to ``bounds`` (a bounded quantity: an accuracy lies in [0, 1]); the method
    then says ``clipped``.  Clipping never lowers coverage: the true mean lies inside the bounds."""
    if bounds is None or not (math.isfinite(iv.lo) and math.isfinite(iv.hi)):
        return iv
    b0, b1 = bounds
    if b0 >= b1:
        raise ValueError(f"bounds must be (low, high) with low < high, got {bounds}")
    lo, hi = max(iv.lo, b0), min(iv.hi, b1)
    if (lo, hi) == (iv.lo, iv.hi):
        return iv
    return Interval(iv.mean, lo, hi, iv.n, f"{iv.method}, clipped to [{b0:g}, {b1:g}]", iv.level, iv.unit)


def mean_ci(values: Sequence[float], level: float = LEVEL, unit: str = "seeds",
            bounds: tuple[float, float] | None = None) -> Interval:
    """Student-t ``level`` interval of the mean of ``values`` [n] (NaNs dropped); ``bounds``: the quantity's range
    (e.g. ``(0, 1)`` for an accuracy), to which the interval is clipped (:func:`clip`).

    ``n < 2``: the mean (or NaN) with a NaN interval, ``method="none"``: one value has no interval."""
    _check_level(level)
    x = _finite(values)
    if x.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, "none", level, unit)
    m = float(x.mean())
    if x.size == 1:
        return Interval(m, float("nan"), float("nan"), 1, "none", level, unit)
    se = float(x.std(ddof=1)) / math.sqrt(x.size)
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1)) * se
    return clip(Interval(m, m - half, m + half, int(x.size), "t", level, unit), bounds)


def paired_diff_ci(a: Sequence[float], b: Sequence[float], level: float = LEVEL, unit: str = "seeds") -> Interval:
    """Student-t interval of mean(a - b) for values paired by index (the same seed or round); ``a``, ``b`` [n]."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired values need equal shapes, got {a.shape} and {b.shape}")
    return mean_ci(a - b, level, unit)


def bootstrap_ci(values: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0,
                 unit: str = "items") -> Interval:
    """Percentile bootstrap interval of the mean of ``values`` [n] (NaNs dropped), for ``n >=``
    :data:`MIN_BOOTSTRAP_N` only: below that its coverage falls short of ``level`` (with 3 values the "95%"
    interval is [min, max], 75% coverage), so use :func:`mean_ci`.  Deterministic (a fixed generator seed)."""
    _check_level(level)
    x = _finite(values)
    if x.size < MIN_BOOTSTRAP_N:
        raise ValueError(f"a percentile bootstrap needs >= {MIN_BOOTSTRAP_N} values to be valid, got {x.size}; "
                         "use mean_ci (Student-t) for few seeds")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return Interval(float(x.mean()), float(lo), float(hi), int(x.size), "bootstrap", level, unit)


def hierarchical_ci(values, level: float = LEVEL, bounds: tuple[float, float] | None = None) -> Interval:
    """Interval of the mean of ``values`` [S, N] (seeds x evaluation items, the same items in every row).

    ``S >= 2``: the Student-t interval across the S seed means (each seed mean already carries its own
    evaluation noise, so the interval carries both the training-run and the evaluation variance);
    ``S == 1``: the t-interval across the N items, ``method="t-items"``, ``unit="items"``: evaluation noise
    only, which says nothing about another training seed.  ``bounds``: see :func:`mean_ci`."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 2 or x.size == 0 or not np.isfinite(x).all():
        raise ValueError(f"values must be a finite, non-empty [seeds, items] array, got shape {x.shape}")
    if x.shape[0] == 1:
        iv = mean_ci(x[0], level, unit="items")
        return clip(Interval(iv.mean, iv.lo, iv.hi, iv.n, "t-items" if iv.n > 1 else "none", level, "items"), bounds)
    return mean_ci(x.mean(1), level, unit="seeds", bounds=bounds)


@dataclass(frozen=True)
class ControlTest:
    """A measured ``value`` against ``n`` draws of a random control: ``p`` = permutation p-value of "the
    value is larger than the control's" (``side=+1``; ``side=-1``: smaller), ``median`` / ``p95`` of the draws
    (``p95``: the 95th percentile on the claim's side, i.e. the 5th for ``side=-1``)."""

    value: float
    n: int
    p: float
    median: float
    p95: float
    side: int = 1
    spread: float = float("nan")  # max - min of the draws (0: the control never moved the measure)

    def degenerate(self) -> bool:
        """True when neither the draws nor the value moved the measure: a test that cannot be won or lost."""
        return self.spread == 0 and self.value == self.median

    def as_dict(self) -> dict:
        return {"value": self.value, "n_draws": self.n, "p": self.p, "control_median": self.median,
                "control_p95": self.p95, "side": self.side}

    def fmt(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}g} vs random median {self.median:.{digits}g}, " \
               f"{'95th' if self.side > 0 else '5th'} pct {self.p95:.{digits}g} (p={self.p:.3g}, {self.n} draws)"


def control_test(value: float, draws: Sequence[float], side: int = 1, min_draws: int = MIN_CONTROL_DRAWS) -> ControlTest:
    """Compare ``value`` with ``draws`` [n] of its random control; ``n >= min_draws`` (default
    :data:`MIN_CONTROL_DRAWS`, enough for a 95th percentile and a p-value below 0.005 to exist).

    p = (1 + #{draw >= value}) / (1 + n) for ``side=+1`` (``<=`` for ``side=-1``): the exact permutation
    p-value when the measured value is exchangeable with the draws under the null."""
    if side not in (1, -1):
        raise ValueError(f"side must be +1 or -1, got {side}")
    d = _finite(draws)
    if d.size < min_draws:
        raise ValueError(f"a random control needs >= {min_draws} draws for its percentile, got {d.size}")
    if not math.isfinite(value):
        return ControlTest(float(value), int(d.size), float("nan"), float(np.median(d)), float("nan"), side,
                           float(np.ptp(d)))
    worse = int((d >= value).sum()) if side > 0 else int((d <= value).sum())
    p = (1 + worse) / (1 + d.size)
    p95 = float(np.percentile(d, 95 if side > 0 else 5))
    return ControlTest(float(value), int(d.size), float(p), float(np.median(d)), p95, side, float(np.ptp(d)))
