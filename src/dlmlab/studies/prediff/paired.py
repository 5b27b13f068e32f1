"""Paired comparisons between two adaptation methods over seeds and held-out windows.

A comparison "A beats B" uses, for every training seed ``s`` and held-out window ``w``, the difference
``d[s, w] = nll_A[s, w] - nll_B[s, w]`` (both methods evaluated on the same windows with the same mask
rates and masks).  Its 95% interval is the two-level bootstrap of :func:`dlmlab.report.intervals.hierarchical_ci`
(seeds, then windows), so it carries the training-run variance as well as the evaluation noise.
"A beats B" (lower is better) holds only when the whole interval lies below zero.
"""

from __future__ import annotations

import numpy as np

from dlmlab.report.intervals import hierarchical_ci


def hierarchical_bootstrap(values) -> dict:
    """values [S, N] (seeds x windows; N may be 1) -> {mean, lo, hi, per_seed, n_seeds, n_windows, level}."""
    x = np.asarray(values, dtype=np.float64)
    iv = hierarchical_ci(x)
    return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "per_seed": [float(v) for v in x.mean(1)],
            "n_seeds": x.shape[0], "n_windows": x.shape[1], "level": 0.95}


def lower_is_better(a, b) -> dict:
    """Paired comparison of per-(seed, window) values ``a`` and ``b`` [S, N]: the interval of mean(a - b) and
    ``holds`` = the whole interval is below zero (A is lower than B beyond the seed and window noise)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values need equal shapes, got {a.shape} and {b.shape}")
    out = hierarchical_bootstrap(a - b)
    out["holds"] = out["hi"] < 0
    return out
