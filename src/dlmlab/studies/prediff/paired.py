"""Paired comparisons between two adaptation methods over seeds and held-out windows.

A comparison "A beats B" uses, for every training seed ``s`` and held-out window ``w``, the difference
``d[s, w] = nll_A[s, w] - nll_B[s, w]`` (both methods evaluated on the same windows with the same mask
rates and masks).  Its 95% interval is a two-level (hierarchical) bootstrap: each replicate resamples
the seeds with replacement, then the windows with replacement, and takes the mean of ``d`` over the
resampled grid; the interval is the 2.5th-97.5th percentile of the replicates.  Resampling the seeds
carries the training-run variance into the interval, resampling the windows the evaluation noise.
"A beats B" (lower is better) holds only when the whole interval lies below zero.
"""

from __future__ import annotations

import numpy as np

N_BOOT = 4000
LEVEL = 0.95


def hierarchical_bootstrap(diffs, n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL) -> dict:
    """diffs [S, N] (seeds x windows; N may be 1) -> {mean, lo, hi, per_seed, n_seeds, n_windows, level}.

    Deterministic: the resampling generator is seeded with ``seed``.
    """
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"diffs must be a non-empty [seeds, windows] array, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValueError("diffs must be finite")
    S, N = d.shape
    rng = np.random.default_rng(seed)
    reps = np.empty(n_boot)
    for b in range(n_boot):
        rows = rng.integers(0, S, S)
        cols = rng.integers(0, N, N)
        reps[b] = d[np.ix_(rows, cols)].mean()
    alpha = (1.0 - level) / 2
    return {"mean": float(d.mean()), "lo": float(np.quantile(reps, alpha)), "hi": float(np.quantile(reps, 1 - alpha)),
            "per_seed": [float(x) for x in d.mean(1)], "n_seeds": S, "n_windows": N, "level": level}


def lower_is_better(a, b, **kw) -> dict:
    """Paired comparison of per-(seed, window) values ``a`` and ``b`` [S, N]: the interval of mean(a - b) and
    ``holds`` = the whole interval is below zero (A is lower than B beyond the seed and window noise)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values need equal shapes, got {a.shape} and {b.shape}")
    out = hierarchical_bootstrap(a - b, **kw)
    out["holds"] = out["hi"] < 0
    return out
