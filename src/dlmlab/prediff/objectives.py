"""Adaptation methods: the PreDiff recipe and the baselines, each training through an objective
(:class:`~dlmlab.objectives.PrefixDiffusionObjective` or :class:`~dlmlab.objectives.ARObjective`).

Methods (all under the same step / batch budget):

=================  ===========  ======================================  =====================
name               init         attention                               objective
=================  ===========  ======================================  =====================
prediff            pretrained   hybrid (prompt causal, target bidir.)   masked diffusion
uniform_bidir      pretrained   bidirectional everywhere                masked diffusion
diffugpt           pretrained   causal -> bidirectional, annealed       shifted masked diffusion
attn_obj           pretrained   hybrid, target block annealed           shifted masked diffusion
scratch            random       hybrid                                  masked diffusion
ar_control         pretrained   causal                                  next-token (AR)
=================  ===========  ======================================  =====================

Every diffusion method uses the same wrapper (time embedding + self-conditioning),
so the comparisons isolate attention and objective.  A training row is a window
[B,T]; its first ``P = round(prompt_frac * T)`` tokens (default half, as in the study)
are a clean prompt and the rest is the target, masked with probability ``t_b``; the two training
losses (``masked_ce``, the study's, and ``mdlm_bound``) are :mod:`dlmlab.objectives.prefix`'s.

Evaluation always reports the true bound (:func:`eval_nelbo`); :func:`eval_original_weighting`
gives the 1/(1-t)-weighted number of the study's public code for comparison with the paper
(it is not a bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dlmlab.config import Config, require
from dlmlab.data import TokenStream
from dlmlab.objectives import ARObjective, masked_nll
from dlmlab.objectives.prefix import (COSINE_T_RANGE, LOSSES, Attention, Loss, PrefixDiffusionObjective,  # noqa: F401
                                      annealed_mask, cosine_mask_rates, diffusion_loss, final_attention,
                                      masked_losses, prompt_length)
from dlmlab.objectives.schedule import NoiseSchedule, get_schedule

ObjectiveName = Literal["mdlm", "shifted_mdlm", "ar"]
#: the objective class each ``MethodConfig.objective`` option trains with (what the method asks about it)
OBJECTIVE_CLASSES: dict[str, type] = {"mdlm": PrefixDiffusionObjective, "shifted_mdlm": PrefixDiffusionObjective,
                                      "ar": ARObjective}


@dataclass
class MethodConfig(Config):  # checked when built (options, finite numbers, validate())
    """One adaptation method.  ``anneal_frac``: fraction of training over which an annealed mask opens."""

    name: str
    init: Literal["pretrained", "scratch"] = "pretrained"
    attention: Attention = "hybrid"
    objective: ObjectiveName = "mdlm"
    self_cond_frac: float = 0.5  # share of each batch trained with a self-conditioning first pass
    anneal_frac: float = 0.5

    def validate(self) -> None:
        require(0 <= self.self_cond_frac <= 1, f"{self.name}: self_cond_frac must be in [0, 1]")
        require(0 < self.anneal_frac <= 1, f"{self.name}: anneal_frac must be in (0, 1]")
        if not self.is_diffusion:
            require(self.attention == "causal", f"{self.name}: the AR objective needs causal attention")
        else:
            require(self.attention != "causal", f"{self.name}: a diffusion objective cannot use causal attention")

    @property
    def is_diffusion(self) -> bool:
        """False for a next-token objective (AR), True for the masked-diffusion ones."""
        return not OBJECTIVE_CLASSES[self.objective].next_token

    @property
    def shift(self) -> bool:
        return self.objective == "shifted_mdlm"

    @property
    def final_attention(self) -> str:
        """The mask used after training (sampling / evaluation)."""
        return final_attention(self.attention)


METHODS: dict[str, MethodConfig] = {
    "prediff": MethodConfig("prediff", "pretrained", "hybrid", "mdlm"),
    "uniform_bidir": MethodConfig("uniform_bidir", "pretrained", "bidirectional", "mdlm"),
    "diffugpt": MethodConfig("diffugpt", "pretrained", "annealed", "shifted_mdlm"),
    "attn_obj": MethodConfig("attn_obj", "pretrained", "hybrid_annealed", "shifted_mdlm"),
    "scratch": MethodConfig("scratch", "scratch", "hybrid", "mdlm"),
    "ar_control": MethodConfig("ar_control", "pretrained", "causal", "ar"),
}


def method_objective(method: MethodConfig, seq_len: int, steps: int, prompt_frac: float = 0.5,
                     loss: Loss = "masked_ce", schedule: NoiseSchedule | str | None = None):
    """The objective a method trains with: :class:`ARObjective` (``ar_control``, windows of ``seq_len + 1``)
    or a :class:`PrefixDiffusionObjective` with the method's attention, self-conditioning share and annealing."""
    method.validate()
    require(loss in LOSSES, f"loss must be one of {LOSSES}, got {loss!r}")
    if not method.is_diffusion:
        return ARObjective()
    return PrefixDiffusionObjective(seq_len, steps, prompt_frac, loss, schedule, attention=method.attention,
                                    self_cond_frac=method.self_cond_frac, anneal_frac=method.anneal_frac)


def make_task(method: MethodConfig, stream_train: torch.Tensor, seq_len: int, batch: int, steps: int,
              prompt_frac: float = 0.5, loss: Loss = "masked_ce", schedule: NoiseSchedule | None = None):
    """(batches, objective) for ``training.train``: ``batches(step, gen)`` cuts windows of ``stream_train``
    (``seq_len``, or ``seq_len + 1`` for AR), the method's objective (:func:`method_objective`) draws the rest.
    All randomness is drawn from the step's generator (global batch, on CPU); the loss moves the batch to the
    model's device."""
    obj = method_objective(method, seq_len, steps, prompt_frac, loss, schedule)
    width = obj.window(seq_len)

    def batches(step: int, gen: torch.Generator) -> torch.Tensor:
        return TokenStream.windows(stream_train, batch, width, gen)

    return batches, obj


@torch.no_grad()
def eval_nelbo_per_window(model, windows: torch.Tensor, prompt_len: int, n_t: int = 8, batch: int = 32, seed: int = 0,
                          self_cond: bool = True, attn_mask=None, schedule: NoiseSchedule | None = None) -> torch.Tensor:
    """Monte-Carlo NELBO [N] (nats / target token) of each window of ``windows`` [N,T] given its first ``prompt_len``.

    ``n_t`` antithetic draws of t from ``schedule`` (default linear: t ~ U[1e-3, 1]) per window; self-conditioning (a deterministic function of
    the noisy input) keeps it a valid bound.  The draws depend only on ``seed`` and the window count, so two
    models evaluated with one seed see the same times and masks (paired comparisons).
    """
    model.eval()
    sched = get_schedule(schedule)
    g = torch.Generator().manual_seed(seed)
    out = []
    for xb in windows.split(batch):
        B, T = xb.shape
        P = torch.full((B,), prompt_len, dtype=torch.long)
        acc = torch.zeros(B, dtype=torch.float64)
        for _ in range(n_t):
            t = sched.sample_t(B, g)
            noise = torch.rand(xb.shape, generator=g)
            rows = torch.ones(B, dtype=torch.bool) if self_cond else None
            per_row, _ = masked_losses(model, xb, P, t, noise, rows, attn_mask=attn_mask, schedule=sched)
            acc += per_row.double().cpu()
        out.append(acc / n_t)
    return torch.cat(out)


def eval_nelbo(model, windows: torch.Tensor, prompt_len: int, n_t: int = 8, batch: int = 32, seed: int = 0,
               self_cond: bool = True, attn_mask=None, schedule: NoiseSchedule | None = None) -> float:
    """Mean of :func:`eval_nelbo_per_window`: ``exp`` of it is the ELBO perplexity bound."""
    return float(eval_nelbo_per_window(model, windows, prompt_len, n_t, batch, seed, self_cond, attn_mask,
                                       schedule).mean())


@torch.no_grad()
def eval_original_weighting(model, windows: torch.Tensor, prompt_len: int, n_t: int = 16, batch: int = 32,
                            seed: int = 0) -> float:
    """The study's public code's "ELBO" (nats / token), for comparison with the paper; NOT a bound.

    A midpoint rule over ``n_t`` mask rates ``t_k = (k + 1/2) / n_t``: at each, every target token is masked
    with probability ``t_k`` (at least one per window), the mean cross-entropy over masked tokens is weighted
    by ``1 / (1 - t_k)``, and the weighted values are averaged (``sum_k w_k CE_k / n_t``), without
    self-conditioning, as that code does.
    """
    model.eval()
    g = torch.Generator().manual_seed(seed)
    inner = getattr(model, "module", model)
    total, count = 0.0, 0
    for xb in windows.split(batch):
        B, T = xb.shape
        P = torch.full((B,), prompt_len, dtype=torch.long)
        target = torch.arange(T)[None, :] >= prompt_len
        value = 0.0
        for k in range(n_t):
            tk = (k + 0.5) / n_t
            masked = (torch.rand(xb.shape, generator=g) < tk) & target
            empty = ~masked.any(1)
            if bool(empty.any()):  # at least one masked target token per window
                pick = torch.randint(prompt_len, T, (int(empty.sum()),), generator=g)
                masked[empty.nonzero().squeeze(1), pick] = True
            masked = masked.to(xb.device)
            noisy = torch.where(masked, torch.full_like(xb, inner.mask_id), xb)
            logits = model(noisy, torch.full((B,), tk), prompt_len=P)
            ce = masked_nll(logits, xb, masked, inner.mask_id).sum() / masked.sum()
            value += ce.item() / (1.0 - tk) / n_t
        total += value * B
        count += B
    return total / max(1, count)
