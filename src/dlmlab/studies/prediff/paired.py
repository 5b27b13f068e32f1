"""Paired comparisons between two adaptation methods: over seeds and held-out windows, over censored
steps-to-threshold, and over interleaved timing rounds.

* :func:`seed_mean_t_interval` — ``values`` [S, N] (seeds x windows): the Student-t 95% interval across
  the S seed means (:func:`dlmlab.report.intervals.hierarchical_ci`); each seed mean carries its windows'
  evaluation noise, and the t quantile for S - 1 degrees of freedom makes the interval valid for a handful of
  seeds (with one seed: a t-interval over the windows, evaluation noise only, ``method="t-items"``).
* :func:`lower_is_better` — A vs B from ``d[s, w] = A[s, w] - B[s, w]`` (both methods evaluated on the same
  windows with the same mask rates and masks): "A beats B" holds only when the whole interval is below 0.
* :func:`censored_steps_difference` — steps to a threshold, where a run that never reaches it within the
  budget is censored (">= budget"): per seed the difference A - B is known only up to a range, and the
  interval bounds the mean difference from both sides.
* :func:`round_log_ratios` — tokens/s of two decoders timed in the same interleaved rounds: the per-round log
  speed ratio and its t-interval over rounds (a speed claim judged on ratios within one run).

Every result carries ``n`` (the units its interval rests on) and ``unit`` so that no interval is shown
without its sample size.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dlmlab.report.intervals import LEVEL, hierarchical_ci, mean_ci


def seed_mean_t_interval(values) -> dict:
    """values [S, N] (seeds x windows; N may be 1) -> {mean, lo, hi, n, unit, method, per_seed, n_seeds,
    n_windows, level}: the t-interval across seed means (see the module docstring)."""
    x = np.asarray(values, dtype=np.float64)
    iv = hierarchical_ci(x)
    return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n, "unit": iv.unit, "method": iv.method,
            "per_seed": [float(v) for v in x.mean(1)], "n_seeds": x.shape[0], "n_windows": x.shape[1],
            "level": iv.level}


def lower_is_better(a, b) -> dict:
    """Paired comparison of per-(seed, window) values ``a`` and ``b`` [S, N]: the interval of mean(a - b) and
    ``holds`` = the whole interval is below zero (A is lower than B beyond the seed and window noise)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired values need equal shapes, got {a.shape} and {b.shape}")
    out = seed_mean_t_interval(a - b)
    out["holds"] = bool(out["hi"] < 0)
    return out


def censored_steps_difference(a: Sequence[int | None], b: Sequence[int | None], budget: int,
                              level: float = LEVEL) -> dict:
    """Steps A needs minus steps B needs to reach a threshold, per seed (paired by index; ``None`` = not
    reached within ``budget``: censored, the run would need ``>= budget`` steps).

    Per seed the difference lies in [lo_s, hi_s]: both reached -> exactly a - b; A censored -> [budget - b,
    +inf); B censored -> (-inf, a - budget]; both censored -> (-inf, +inf).  The mean difference lies between
    the means of the lower and of the upper bounds, so its interval is [the t-interval's lower end over lo_s,
    the t-interval's upper end over hi_s] (an infinite bound in any seed leaves that end infinite): valid
    (conservative) whatever the censored runs would have needed.  ``mean`` is the difference with censored
    runs counted at the budget (it lies inside the interval).  ``holds``: the interval is wholly below 0."""
    if len(a) != len(b) or not len(a):
        raise ValueError(f"paired steps need equal, non-empty lengths, got {len(a)} and {len(b)}")
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    lo_s, hi_s, at_budget = [], [], []
    for x, y in zip(a, b):
        xa, yb = (budget if x is None else x), (budget if y is None else y)
        at_budget.append(float(xa - yb))
        lo_s.append(-math.inf if y is None else float(xa - y))
        hi_s.append(math.inf if x is None else float(x - yb))
    lo = -math.inf if -math.inf in lo_s else mean_ci(lo_s, level).lo
    hi = math.inf if math.inf in hi_s else mean_ci(hi_s, level).hi
    n = len(a)
    return {"mean": float(np.mean(at_budget)), "lo": float(lo), "hi": float(hi), "n": n, "unit": "seeds",
            "method": "t, censored bounds", "per_seed": at_budget, "per_seed_bounds": [[l, h] for l, h in zip(lo_s, hi_s)],
            "n_seeds": n, "n_windows": 1, "level": level, "holds": bool(hi < 0)}


def round_log_ratios(times_fast: Sequence[float], times_slow: Sequence[float], tokens_fast: int = 1,
                     tokens_slow: int = 1, level: float = LEVEL) -> dict:
    """Speed of decoder F over decoder S from the same interleaved rounds: per round r,
    ``log(tokens_fast / times_fast[r]) - log(tokens_slow / times_slow[r])`` (log of the tokens/s ratio);
    {mean, lo, hi (log ratio, t over rounds), ratio / ratio_interval (exp of them: the geometric-mean ratio),
    n, unit, per_round}."""
    f, s = np.asarray(times_fast, dtype=float), np.asarray(times_slow, dtype=float)
    if f.shape != s.shape or f.ndim != 1:
        raise ValueError(f"timing rounds must pair up, got {f.shape} and {s.shape}")
    if (f <= 0).any() or (s <= 0).any():
        raise ValueError("timings must be positive")
    lr = np.log(tokens_fast / f) - np.log(tokens_slow / s)
    iv = mean_ci(lr, level, unit="rounds")
    ex = lambda v: math.exp(v) if math.isfinite(v) else math.nan  # noqa: E731
    return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n, "unit": "rounds", "method": iv.method,
            "ratio": ex(iv.mean), "ratio_interval": [ex(iv.lo), ex(iv.hi)], "per_round": [float(v) for v in lr],
            "level": level}


def fmt_interval(c: dict, digits: int = 4) -> str:
    """``[-0.0123, 0.0045] (n=3 seeds, t)`` of a comparison dict (infinite ends, stored as null in results.json,
    printed as -inf / inf)."""
    def f(v, unbounded):
        if v is None:
            return unbounded
        return f"{v:.{digits}g}" if math.isfinite(v) else ("-inf" if v < 0 else "inf" if v > 0 else "nan")
    return f"[{f(c['lo'], '-inf')}, {f(c['hi'], 'inf')}] (n={c.get('n', c.get('n_seeds'))} " \
           f"{c.get('unit', 'seeds')}, {c.get('method', 't')})"
