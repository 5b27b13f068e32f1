"""Adaptation objectives: the PreDiff recipe and the baselines, as (make_batch, loss_fn) for ``training.train``.

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
are a clean prompt and the rest is the target, masked with probability ``t_b``.

Two training losses (:data:`LOSSES`), the same for every diffusion method of a run:

* ``masked_ce`` (the study's): plain cross-entropy averaged over the masked target tokens
  of the batch, with mask rates from the cosine schedule ``t = cos(pi u / 2)``, ``u ~ U[0, 1]``
  (stratified), clipped to [0.01, 0.99]; the density of ``t`` rises towards 1.
* ``mdlm_bound``: the MDLM NELBO per target token, ``w(t) * sum_masked NLL / n_target`` under a
  :class:`~dlmlab.objectives.schedule.NoiseSchedule` (default linear: ``w = 1/t``, ``t ~ U[1e-3, 1]``),
  an upper bound on ``-log p(target | prompt) / n_target``.

The ``masked_ce`` mask rates are MaskGIT's cosine rule for the *rate* itself; they are not the times
of a noise schedule (the cosine noise schedule's mask probability ``1 - cos(pi t / 2)`` at uniform
``t`` has another distribution), so they stay a rule of their own.

Evaluation always reports the true bound (:func:`eval_nelbo`); :func:`eval_original_weighting`
gives the 1/(1-t)-weighted number of the study's public code for comparison with the paper
(it is not a bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from dlmlab.config import Config, require
from dlmlab.data import TokenStream
from dlmlab.models.masks import build_mask
from dlmlab.objectives import ARObjective, corrupt, masked_nll
from dlmlab.objectives.objective import Batch, model_device
from dlmlab.objectives.mdlm import nelbo_per_row
from dlmlab.objectives.schedule import NoiseSchedule, get_schedule, uniform_times

Attention = Literal["hybrid", "bidirectional", "annealed", "hybrid_annealed", "causal"]
ObjectiveName = Literal["mdlm", "shifted_mdlm", "ar"]
Loss = Literal["masked_ce", "mdlm_bound"]
LOSSES: tuple[str, ...] = ("masked_ce", "mdlm_bound")
COSINE_T_RANGE = (0.01, 0.99)  # the study's clip of the cosine mask rates


def cosine_mask_rates(batch: int, gen: torch.Generator | None) -> torch.Tensor:
    """t [B] = cos(pi u / 2) for stratified u in [0, 1), clipped to :data:`COSINE_T_RANGE` (the study's schedule)."""
    return torch.cos(uniform_times(batch, gen) * math.pi / 2).clamp(*COSINE_T_RANGE)


def prompt_length(prompt_frac: float, T: int) -> int:
    """The clean-prompt length of a window of ``T`` tokens: ``round(prompt_frac * T)`` within [1, T-1]."""
    require(0 < prompt_frac < 1, f"prompt_frac must be in (0, 1), got {prompt_frac}")
    return min(T - 1, max(1, round(prompt_frac * T)))


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
        if self.objective == "ar":
            require(self.attention == "causal", f"{self.name}: the AR objective needs causal attention")
        else:
            require(self.attention != "causal", f"{self.name}: a diffusion objective cannot use causal attention")

    @property
    def is_diffusion(self) -> bool:
        return self.objective != "ar"

    @property
    def shift(self) -> bool:
        return self.objective == "shifted_mdlm"

    @property
    def final_attention(self) -> str:
        """The mask used after training (sampling / evaluation)."""
        return {"annealed": "bidirectional", "hybrid_annealed": "hybrid"}.get(self.attention, self.attention)


METHODS: dict[str, MethodConfig] = {
    "prediff": MethodConfig("prediff", "pretrained", "hybrid", "mdlm"),
    "uniform_bidir": MethodConfig("uniform_bidir", "pretrained", "bidirectional", "mdlm"),
    "diffugpt": MethodConfig("diffugpt", "pretrained", "annealed", "shifted_mdlm"),
    "attn_obj": MethodConfig("attn_obj", "pretrained", "hybrid_annealed", "shifted_mdlm"),
    "scratch": MethodConfig("scratch", "scratch", "hybrid", "mdlm"),
    "ar_control": MethodConfig("ar_control", "pretrained", "causal", "ar"),
}


def annealed_mask(kind: str, prompt_len: torch.Tensor, T: int, progress: float, gen: torch.Generator) -> torch.Tensor:
    """Boolean "may attend" mask [B,1,T,T] opening from causal as ``progress`` goes 0 -> 1.

    ``annealed`` (DiffuGPT): every future key is visible with probability ``progress``.
    ``hybrid_annealed``: the hybrid mask, but target->target future keys open with probability ``progress``.
    """
    B = prompt_len.shape[0]
    pos = torch.arange(T)
    causal = (pos[None, :] <= pos[:, None])[None, None]  # [1,1,T,T]
    opened = causal | (torch.rand(B, 1, T, T, generator=gen) < progress)
    if kind == "annealed":
        return opened
    hybrid = build_mask("hybrid", pos, pos, prompt_len)  # [B,1,T,T]
    P = prompt_len.reshape(-1, 1, 1, 1)
    both_target = (pos[None, None, :, None] >= P) & (pos[None, None, None, :] >= P)
    return torch.where(both_target, opened, hybrid)


class PrefixDiffusionObjective:
    """A diffusion method's objective (:class:`~dlmlab.objectives.objective.Objective` protocol): a window's
    first ``prompt_length(prompt_frac, seq_len)`` tokens stay clean and the rest is masked at rate ``t``.

    ``make_batch(tokens [B, T], gen, step=0)`` draws, in this order: ``t`` [B] (``masked_ce``: the study's
    cosine mask rates; ``mdlm_bound``: ``schedule``'s times), ``noise`` [B, T] uniforms for the masks,
    ``self_cond`` [B] bool rows with a self-conditioning first pass, and for an annealed method ``attn``
    [B, 1, T, T], the mask opened to ``min(1, step / (anneal_frac * steps))``; ``prompt_len`` [B] is fixed.
    ``loss(model, batch)`` is :func:`diffusion_loss` on the model's device (``attn`` when drawn, else the
    method's final mask)."""

    name = "mdlm"

    def __init__(self, method: MethodConfig, seq_len: int, steps: int, prompt_frac: float = 0.5,
                 loss: Loss = "masked_ce", schedule: NoiseSchedule | str | None = None) -> None:
        method.validate()
        require(method.is_diffusion, f"{method.name} is not a diffusion method (its objective is AR)")
        require(loss in LOSSES, f"loss must be one of {LOSSES}, got {loss!r}")
        self.method, self.steps, self.loss_name = method, steps, loss
        self.prompt_len = prompt_length(prompt_frac, seq_len)
        self.schedule = get_schedule(schedule)

    def progress(self, step: int) -> float:
        """How far an annealed mask has opened at ``step`` (0: causal, 1: the method's final mask)."""
        return min(1.0, step / max(1.0, self.method.anneal_frac * self.steps))

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None, step: int = 0,
                   **extra: torch.Tensor) -> Batch:
        B, T = tokens.shape
        P = torch.full((B,), self.prompt_len, dtype=torch.long)
        t = cosine_mask_rates(B, gen) if self.loss_name == "masked_ce" else self.schedule.sample_t(B, gen)
        out = {"tokens": tokens, "prompt_len": P, "t": t, "noise": torch.rand(tokens.shape, generator=gen),
               "self_cond": torch.rand(B, generator=gen) < self.method.self_cond_frac}
        if self.method.attention in ("annealed", "hybrid_annealed"):
            out["attn"] = annealed_mask(self.method.attention, P, T, self.progress(step), gen)
        return {**out, **extra}

    def loss(self, model, batch: Batch) -> tuple[torch.Tensor, dict]:
        dev = model_device(model)
        b = {k: v.to(dev) for k, v in batch.items()}
        attn = b.get("attn")
        return diffusion_loss(model, b["tokens"], b["prompt_len"], b["t"], b["noise"], b["self_cond"],
                              attn_mask=attn if attn is not None else self.method.final_attention, loss=self.loss_name,
                              schedule=self.schedule if self.loss_name == "mdlm_bound" else None)  # masked_ce: t is the rate


def method_objective(method: MethodConfig, seq_len: int, steps: int, prompt_frac: float = 0.5,
                     loss: Loss = "masked_ce", schedule: NoiseSchedule | str | None = None):
    """The objective a method trains with: :class:`ARObjective` (``ar_control``, windows of ``seq_len + 1``)
    or :class:`PrefixDiffusionObjective`."""
    method.validate()
    if not method.is_diffusion:
        return ARObjective()
    return PrefixDiffusionObjective(method, seq_len, steps, prompt_frac, loss, schedule)


def make_task(method: MethodConfig, stream_train: torch.Tensor, seq_len: int, batch: int, steps: int,
              prompt_frac: float = 0.5, loss: Loss = "masked_ce", schedule: NoiseSchedule | None = None):
    """(make_batch, loss_fn) for ``training.train``: windows of ``stream_train`` through the method's objective
    (:func:`method_objective`).  All randomness is drawn in make_batch (global batch, on CPU); the loss moves
    the batch to the model's device."""
    require(loss in LOSSES, f"loss must be one of {LOSSES}, got {loss!r}")
    obj = method_objective(method, seq_len, steps, prompt_frac, loss, schedule)
    width = seq_len + (0 if method.is_diffusion else 1)

    def make_batch(step: int, gen: torch.Generator) -> dict:
        x = TokenStream.windows(stream_train, batch, width, gen)
        return obj.make_batch(x, gen, step=step) if method.is_diffusion else obj.make_batch(x, gen)

    return make_batch, obj.loss


def diffusion_loss(model, tokens: torch.Tensor, prompt_len: torch.Tensor, t: torch.Tensor, noise: torch.Tensor,
                   self_cond_rows: torch.Tensor | None = None, attn_mask=None,
                   loss: Loss = "mdlm_bound", schedule: NoiseSchedule | None = None) -> tuple[torch.Tensor, dict]:
    """Training loss for windows ``tokens`` [B,T] with prompts of ``prompt_len`` [B] at mask rates ``t`` [B].

    ``loss="mdlm_bound"``: the MDLM NELBO per target token (its mean over rows; ``exp`` is the ELBO
    perplexity bound when ``t ~ U[eps, 1]``); ``loss="masked_ce"``: mean cross-entropy over the masked
    tokens of the batch.  ``self_cond_rows`` [B] bool: rows that first run a no-grad pass and feed its soft
    prediction back (zeros elsewhere), as in self-conditioning training.  ``schedule``: the noise schedule
    giving the mask probability and ELBO weight of ``t`` (default linear: ``t`` itself and ``1/t``).
    Returns (loss, metrics); metrics carry ``nelbo`` (nats / target token, per row mean) and ``masked_ce``.
    """
    nelbo_rows, ce = _masked_losses(model, tokens, prompt_len, t, noise, self_cond_rows, attn_mask,
                                    schedule=schedule)
    nelbo = nelbo_rows.mean()
    value = nelbo if loss == "mdlm_bound" else ce
    return value, {"loss": value.item(), "nelbo": nelbo.item(), "ppl_bound": float(torch.exp(nelbo.detach())),
                   "masked_ce": ce.item()}


def _masked_losses(model, tokens, prompt_len, t, noise, self_cond_rows=None, attn_mask=None,
                   self_cond: bool = True, schedule: NoiseSchedule | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (NELBO per row [B]: w(t) * masked NLL / n_target, mean CE over the batch's masked tokens [])."""
    sched = get_schedule(schedule)
    B, T = tokens.shape
    inner = getattr(model, "module", model)  # DDP wraps the PreDiffLM
    pos = torch.arange(T, device=tokens.device)
    maskable = pos[None, :] >= prompt_len[:, None].to(tokens.device)
    noisy, masked = corrupt(tokens, t, inner.mask_id, maskable=maskable, noise=noise, schedule=sched)
    kw = dict(prompt_len=prompt_len, attn_mask=attn_mask)
    sc = None
    if self_cond and inner.uses_self_cond and self_cond_rows is not None and bool(self_cond_rows.any()):
        with torch.no_grad():
            first = model(noisy, t, **kw)
        sc = inner.soft_prediction(first) * self_cond_rows.to(first.device)[:, None, None].float()
    logits = model(noisy, t, self_cond=sc, **kw)
    nll = masked_nll(logits, tokens, masked, inner.mask_id)  # [B,T], zero off the masked positions
    n = maskable.sum(1).clamp(min=1)
    return nelbo_per_row(nll, t, n, sched), nll.sum() / masked.sum().clamp(min=1)


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
            per_row, _ = _masked_losses(model, xb, P, t, noise, rows, attn_mask=attn_mask, schedule=sched)
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
