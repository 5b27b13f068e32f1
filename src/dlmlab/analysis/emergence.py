"""A metric over a run's saved checkpoints (e.g. induction accuracy) and the step where it jumps."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from dlmlab.progress import bar
from dlmlab.rundir.checkpoint import list_checkpoints, load_checkpoint


def checkpoint_curve(model, run_dir: str | Path, metric: Callable[[object], float], progress: bool = False,
                     ) -> list[tuple[int, float]]:
    """[(step, metric(model at step))] over every checkpoint in ``run_dir/checkpoints`` (loads into ``model``).

    The model is left holding the last checkpoint's weights.
    """
    cks = list_checkpoints(Path(run_dir))
    if not cks:
        raise FileNotFoundError(f"no checkpoints under {run_dir}/checkpoints")
    out = []
    for step, path in bar(cks, desc="checkpoints", disable=not progress, leave=False):
        load_checkpoint(path, model)
        model.eval()
        val = metric(model)
        out.append((step, val if isinstance(val, list) else float(val)))
    return out


def checkpoint_curves(model, run_dir: str | Path, metrics: dict[str, Callable[[object], float]],
                      progress: bool = False) -> dict[str, list[tuple[int, float]]]:
    """{name: [(step, metric(model at step))]} for several metrics, loading each checkpoint once."""
    if not metrics:
        raise ValueError("no metrics given")
    names = list(metrics)
    rows = checkpoint_curve(model, run_dir, lambda m: [float(metrics[n](m)) for n in names], progress)
    return {n: [(step, vals[i]) for step, vals in rows] for i, n in enumerate(names)}


def jump_step(curve: list[tuple[int, float]], baseline: float | None = None) -> dict:
    """Where a rising curve jumps.

    ``largest_increase_step``: end step of the largest rise between consecutive points;
    ``midpoint_step``: first step whose value reaches halfway from the start (or ``baseline``) to the
    maximum; ``None`` when the curve never rises.
    """
    if not curve:
        raise ValueError("empty curve")
    steps = [s for s, _ in curve]
    vals = [v for _, v in curve]
    start = vals[0] if baseline is None else baseline
    top = max(vals)
    inc = [(vals[i] - vals[i - 1], steps[i]) for i in range(1, len(vals))]
    best = max(inc) if inc else (0.0, None)
    mid = None
    if top > start:
        half = start + 0.5 * (top - start)
        mid = next(s for s, v in curve if v >= half)
    return {"largest_increase": float(best[0]), "largest_increase_step": best[1] if best[0] > 0 else None,
            "midpoint_step": mid, "start": float(start), "max": float(top), "final": float(vals[-1])}


def rise_width(curve: list[tuple[int, float]], lo: float = 0.1, hi: float = 0.9, baseline: float | None = None) -> dict:
    """How abruptly a rising curve rises: the steps at which it first reaches ``lo`` and ``hi`` of the way from its
    start (or ``baseline``) to its maximum, and their distance.

    ``width`` = step_hi - step_lo (0 when one checkpoint interval holds the whole rise; a resolution of one
    checkpoint interval, ``resolution``); ``None`` values when the curve never rises.  [(step, value)] -> dict.
    """
    if not curve:
        raise ValueError("empty curve")
    if not 0 <= lo < hi <= 1:
        raise ValueError(f"need 0 <= lo < hi <= 1, got {lo}, {hi}")
    steps = [s for s, _ in curve]
    start = curve[0][1] if baseline is None else baseline
    top = max(v for _, v in curve)
    res = min((b - a for a, b in zip(steps, steps[1:])), default=None)
    if top <= start:
        return {"step_lo": None, "step_hi": None, "width": None, "lo": lo, "hi": hi, "resolution": res,
                "start": float(start), "max": float(top)}
    first = lambda f: next(s for s, v in curve if v >= start + f * (top - start))  # noqa: E731
    a, b = first(lo), first(hi)
    return {"step_lo": a, "step_hi": b, "width": b - a, "lo": lo, "hi": hi, "resolution": res,
            "start": float(start), "max": float(top)}
