"""Logit lens over the denoising loop: per layer, per step, per position; and when each token is decided.

:func:`trajectory_lens` reads a :class:`~dlmlab.sampling.trajectory_cache.Trajectory` cached at
:func:`lens_points` (the residual stream before every block and after the last) and applies, at every
cached step, :meth:`dlmlab.interp.activation_cache.ActivationCache.logit_lens` (the final norm with each entry's own scale,
then the unembedding; the last depth is the model's own logits).  The mask token is excluded, as the
sampler excludes it; for a shifted model (Dream) the lens at position ``i`` is read from position ``i-1``,
as the model's own prediction is.  Kept per step: entropy, top-k ids and probabilities (the full
[depths, B, N, V] logits of one step at a time only).

:meth:`TrajectoryLens.decided_at`: "when is a token decided" -- the first step at which a position's final
token is the lens's top-1 at a given depth, counting the steps at which the position was still masked at
the step's input (so the step that committed it counts; steps after it do not) and its activation present.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlmlab.interp.activation_cache import ActivationCache
from dlmlab.errors import UserError
from dlmlab.sampling.denoiser import as_denoiser


def lens_points(model) -> list[str]:
    """The hook points the logit lens reads: ``blocks.{i}.resid_pre`` for every block and the last
    ``blocks.{n-1}.resid_post`` (pass them as ``names_filter``)."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        hooked = getattr(model, "hooked", None) or getattr(model, "backbone", None)
        blocks = getattr(hooked, "blocks", None)
    if not blocks:
        raise UserError(f"the logit lens needs a model with blocks, got a {type(model).__name__}")
    n = len(blocks)
    return [f"blocks.{i}.resid_pre" for i in range(n)] + [f"blocks.{n - 1}.resid_post"]


@dataclass
class TrajectoryLens:
    """steps [S] (the cached steps); labels: the hook names of the depths (D = n_layers + 1); entropy
    [S, D, B, N] (nats); top_ids / top_probs [S, D, B, N, k] (-1 / NaN where absent)."""

    steps: list[int]
    labels: list[str]
    entropy: torch.Tensor
    top_ids: torch.Tensor
    top_probs: torch.Tensor

    def decided_at(self, traj, final: torch.Tensor | None = None) -> torch.Tensor:
        """[D, B, N]: per depth, the first decoder step at which the lens's top-1 is the position's ``final``
        token (default: the decoded tokens) while the position is still masked at the step's input; -1 where
        that never happens (and at positions that were never masked)."""
        final = traj.tokens if final is None else final
        S, D, B, N = self.entropy.shape
        out = torch.full((D, B, N), -1, dtype=torch.long)
        for i in reversed(range(S)):  # walking back, the earliest step wins
            step = self.steps[i]
            masked = traj.masked(step)
            hit = (self.top_ids[i, :, :, :, 0] == final.cpu()[None]) & masked[None]
            out[hit] = step
        return out


@torch.no_grad()
def trajectory_lens(traj, model, k: int = 5) -> TrajectoryLens:
    """The logit lens at every cached step of ``traj`` (cached at :func:`lens_points` of ``model``)."""
    hooked = as_denoiser(model, traj.mask_id, traj.shift).hooked
    if hooked is None:
        raise UserError("the logit lens needs a model with hook points (a dlmlab HookedModule)")
    names = lens_points(hooked)
    missing = [n for n in names if n not in traj.names]
    if missing:
        raise UserError(f"the trajectory did not cache {missing[0]!r}: cache names_filter=lens_points(model)")
    param = next(iter(hooked.parameters()), None)
    dtype = param.dtype if param is not None else torch.float32  # a trajectory cached in another dtype is read in it
    ents, ids, probs, labels = [], [], [], []
    for s in traj.steps_cached:
        store = {n: traj[n, s].to(dtype) for n in names}
        lens = ActivationCache(store, hooked, step=s).logit_lens()
        logits = lens.logits.float()  # [D, B, N, V]
        labels = lens.labels
        logits[..., traj.mask_id] = float("-inf")
        if traj.shift:  # position i is predicted at i - 1
            logits = torch.cat([torch.full_like(logits[:, :, :1], float("nan")), logits[:, :, :-1]], 2)
        logp = logits.log_softmax(-1)
        ents.append(-(logp.exp() * logp.clamp(min=-1e9)).sum(-1))
        p, i = logp.exp().topk(min(k, logp.shape[-1]), dim=-1)
        i[torch.isnan(p)] = -1
        ids.append(i)
        probs.append(p)
    if not ents:
        raise UserError("the trajectory cached no step")
    return TrajectoryLens(traj.steps_cached, labels, torch.stack(ents), torch.stack(ids), torch.stack(probs))
