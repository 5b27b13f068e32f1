"""Activation patching across denoising trajectories.

:func:`patch_trajectory`: decode a *source* trajectory A (a canvas and a seed) caching hook points at step
``s``, decode the *target* B (the same or another canvas, another seed) once as it is and once with A's
activations at step ``s`` written into B's forward at step ``s`` (at the chosen positions where A computed
them), and say what changed in what B committed.  Steps before ``s`` are untouched by construction (the
intervention fires only at ``s``), so the patched target equals the plain one up to step ``s``.  A traced step
holds every row still decoding and an intervened step runs them all, so patching is exact under
``reuse_unchanged`` and exact KV reuse too (approximate KV reuse is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dlmlab.errors import UserError
from dlmlab.sampling.config import DecodeConfig
from dlmlab.sampling.decode import decode
from dlmlab.sampling.denoiser import as_denoiser
from dlmlab.sampling.interventions import Intervention, Positions, StepContext
from dlmlab.sampling.trajectory import DecodeResult
from dlmlab.sampling.trajectory_cache import Trajectory, run_sampler_with_cache


@dataclass
class PatchResult:
    """source: A's :class:`Trajectory` (cached at the patched points); target / patched: B's plain and patched
    :class:`DecodeResult` (records kept).  changed [B, N]: final tokens that differ; first_divergence [B]: the
    first step whose commits (positions or tokens) differ, -1 where none does."""

    source: Trajectory
    target: DecodeResult
    patched: DecodeResult
    step: int
    names: list[str]
    changed: torch.Tensor
    first_divergence: torch.Tensor

    @property
    def n_changed(self) -> int:
        return int(self.changed.sum())

    def summary(self) -> dict:
        return {"step": self.step, "names": self.names, "tokens_changed": self.n_changed,
                "rows_changed": int(self.changed.any(1).sum()), "first_divergence": self.first_divergence.tolist(),
                "target_steps": self.target.steps, "patched_steps": self.patched.steps}


def first_divergence(a: DecodeResult, b: DecodeResult) -> torch.Tensor:
    """[B]: the first step at which two recorded decodes commit different positions or tokens (-1: never)."""
    B = a.tokens.shape[0]
    out = torch.full((B,), -1, dtype=torch.long)
    for j in range(max(len(a.trajectory), len(b.trajectory))):
        if j >= len(a.trajectory) or j >= len(b.trajectory):
            diff = torch.ones(B, dtype=torch.bool)
        else:
            ra, rb = a.trajectory[j], b.trajectory[j]
            diff = ((ra.committed != rb.committed) | (ra.committed & (ra.tokens != rb.tokens))).any(1).cpu()
        out[(out < 0) & diff] = j
    return out


def patch_trajectory(model, canvas: torch.Tensor, prompt_len: int, cfg: DecodeConfig | None = None, *,
                     names: Sequence[str], step: int, source_seed: int, target_seed: int,
                     source_canvas: torch.Tensor | None = None, positions: Positions = "all",
                     mask_id: int | None = None, shift_logits: bool = False) -> PatchResult:
    """Write trajectory A's activations at hook points ``names`` (exact names) at ``step`` into trajectory B at
    ``step``.  A decodes ``source_canvas`` (default ``canvas``) with ``source_seed``; B decodes ``canvas``
    with ``target_seed``.  ``positions``: which of B's positions are written (as in
    :class:`~dlmlab.sampling.interventions.Intervention`), among those A computed at that step."""
    den = as_denoiser(model, mask_id, shift_logits)
    src = canvas if source_canvas is None else source_canvas
    if src.shape != canvas.shape:
        raise UserError(f"source canvas {tuple(src.shape)} and target canvas {tuple(canvas.shape)} differ in shape")
    names = list(names)
    if den.hooked is not None:
        for n in names:
            if n not in den.hooked.hook_points:
                raise UserError(f"patch names must be exact hook point names; {n!r} is not one")
    # a no-op intervention at the step makes A's forward there run every row still decoding on the whole canvas
    # (no reused output, keys or values), as B's patched forward does: A's activations cover every position
    whole = [Intervention(names[0], lambda act, ctx: act, mode="fn", at_steps=[step])] if names else None
    A = run_sampler_with_cache(den, src, prompt_len, cfg, torch.Generator().manual_seed(source_seed),
                               names_filter=names, steps=[step], interventions=whole)
    if step >= A.n_steps:
        raise UserError(f"step {step} out of range: the source decode took {A.n_steps} steps")
    target = decode(den, canvas, prompt_len, cfg, torch.Generator().manual_seed(target_seed), record=True)
    ivs = []
    for n in names:
        value, present = A[n, step], A.present(n, step)

        def where(ctx: StepContext, present=present) -> torch.Tensor:
            chosen = torch.zeros_like(present)
            chosen[ctx.rows, ctx.start:ctx.stop] = ctx.select(positions).cpu()
            return chosen & present

        ivs.append(Intervention(n, value, mode="replace", at_steps=[step], positions=where))
    patched = decode(den, canvas, prompt_len, cfg, torch.Generator().manual_seed(target_seed), record=True,
                     interventions=ivs)
    changed = (patched.tokens != target.tokens).cpu()
    return PatchResult(A, target, patched, step, names, changed, first_divergence(target, patched))
