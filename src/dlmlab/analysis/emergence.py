"""A metric over a run's saved checkpoints (e.g. induction accuracy) and the step where it jumps."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from dlmlab.progress import bar
from dlmlab.training import list_checkpoints, load_checkpoint


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
