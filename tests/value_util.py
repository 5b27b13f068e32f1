"""Independent float64 recomputations that tests compare the toolkit's numbers against (plain loops, no toolkit
code on the computing path unless named)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats


def t_interval(values, level: float = 0.95) -> tuple[float, float, float, int]:
    """(mean, lo, hi, n) of the Student-t ``level`` interval of ``values`` (NaNs dropped), computed in plain float64
    loops; (mean, nan, nan, n) below two values."""
    x = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(x)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    mean = sum(x) / n
    if n == 1:
        return mean, float("nan"), float("nan"), 1
    sd = math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, n


def same(a, b, rel: float = 1e-9, abs_: float = 1e-12) -> bool:
    """``a == b`` for numbers (NaN equals NaN, floats to ``rel``), recursively for lists / dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], rel, abs_) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y, rel, abs_) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == pytest.approx(b, rel=rel, abs=abs_)


def assert_interval(got: dict, values, prefix: str = "", level: float = 0.95,
                    bounds: tuple[float, float] | None = None) -> None:
    """``got`` holds the Student-t interval of ``values`` as ``{prefix}mean / lo / hi / n`` (an Interval dict when
    ``prefix`` is empty, or a claim's flattened evidence); ``bounds``: the quantity's range, the ends clipped to it."""
    mean, lo, hi, n = t_interval(values, level)
    if bounds is not None and lo == lo and hi == hi:  # (NaN ends stay NaN)
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    want = {f"{prefix}mean": mean, f"{prefix}lo": lo, f"{prefix}hi": hi, f"{prefix}n": n}
    have = {k: got[k] for k in want}
    assert same(have, want), (prefix, have, want)


def assert_claims_equal(stored: list[dict], recomputed: list, ids=None) -> None:
    """Stored results.json claims equal the claims recomputed from the stored measurements (verdict, reason,
    detail, holds and every evidence number), claim by claim."""
    rec = {c.id: c.to_dict() for c in recomputed}
    st = {c["id"]: c for c in stored}
    for cid in (ids if ids is not None else st):
        a, b = st[cid], json_round_trip(rec[cid])
        for k in ("verdict", "reason", "holds", "detail", "statement"):
            assert a[k] == b[k], (cid, k, a[k], b[k])
        assert same(a["evidence"], b["evidence"]), (cid, a["evidence"], b["evidence"])


def json_round_trip(d):
    import json

    return json.loads(json.dumps(d))


def entropy_no_mask_f64(logits: torch.Tensor, mask_id: int) -> float:
    """Entropy (nats) of one position's prediction [V] with the mask token excluded, in float64."""
    z = [float(v) for i, v in enumerate(logits.tolist()) if i != mask_id]
    m = max(z)
    s = sum(math.exp(v - m) for v in z)
    p = [math.exp(v - m) / s for v in z]
    return -sum(q * math.log(q) for q in p if q > 0)
