"""95% intervals over seeds: percentile bootstrap of the mean, and of paired differences.

Deterministic (a fixed bootstrap seed), so a result does not depend on the machine.  With few seeds
the percentile interval is close to [min, max] of the values: an interval of paired differences that
excludes 0 then means the difference had the same sign in (nearly) every seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

N_BOOT = 10_000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """Mean of the values and the ``level`` percentile-bootstrap interval [lo, hi] of that mean."""

    mean: float
    lo: float
    hi: float
    n: int

    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0

    def as_dict(self) -> dict:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n}

    def fmt(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def bootstrap_ci(values: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0) -> Interval:
    """Percentile bootstrap interval of the mean of ``values`` [n] (NaNs dropped; NaN interval when none left)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(1)
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return Interval(float(x.mean()), float(lo), float(hi), int(x.size))


def paired_diff_ci(a: Sequence[float], b: Sequence[float], level: float = LEVEL, n_boot: int = N_BOOT,
                   seed: int = 0) -> Interval:
    """Interval of mean(a - b) for values paired by index (e.g. the same seed); ``a``, ``b`` [n]."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired values need equal shapes, got {a.shape} and {b.shape}")
    return bootstrap_ci(a - b, level, n_boot, seed)


def hierarchical_ci(values, level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0) -> Interval:
    """Two-level percentile-bootstrap interval of the mean of ``values`` [S, N] (seeds x evaluation items).

    Each replicate resamples the S rows (training seeds) with replacement, then the N columns (the same
    items for every row: paired evaluation data) with replacement, and averages the resampled grid; so the
    interval carries the training-run variance as well as the evaluation noise.  ``n`` of the result is S.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = np.asarray(values, dtype=float)
    if x.ndim != 2 or x.size == 0 or not np.isfinite(x).all():
        raise ValueError(f"values must be a finite, non-empty [seeds, items] array, got shape {x.shape}")
    S, N = x.shape
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, S, size=(n_boot, S))
    cols = rng.integers(0, N, size=(n_boot, N))
    means = np.array([x[np.ix_(r, c)].mean() for r, c in zip(rows, cols)])
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return Interval(float(x.mean()), float(lo), float(hi), S)
