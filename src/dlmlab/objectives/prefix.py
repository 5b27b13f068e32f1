"""Prefix diffusion: a clean prompt, the target masked (PreDiff's methods): :class:`PrefixDiffusionObjective`.

A training row is a window [B, T]; its first ``P = prompt_length(prompt_frac, T)`` tokens are a clean prompt and
the rest is the target, masked with probability ``t_b``.  The model is a PreDiff-style wrapper (``model(noisy,
t, self_cond=, prompt_len=, attn_mask=)``, ``mask_id``, ``uses_self_cond``, ``soft_prediction``;
:class:`dlmlab.prediff.PreDiffLM`).  Two training losses (:data:`LOSSES`):

* ``masked_ce`` (the PreDiff study's): plain cross-entropy averaged over the masked target tokens of the batch,
  with mask rates from the cosine rule ``t = cos(pi u / 2)``, ``u ~ U[0, 1]`` (stratified), clipped to
  :data:`COSINE_T_RANGE`; the density of ``t`` rises towards 1.
* ``mdlm_bound``: the MDLM NELBO per target token, ``w(t) * sum_masked NLL / n_target`` under a
  :class:`~dlmlab.objectives.schedule.NoiseSchedule` (default linear: ``w = 1/t``, ``t ~ U[1e-3, 1]``), an
  upper bound on ``-log p(target | prompt) / n_target``.

The ``masked_ce`` mask rates are MaskGIT's cosine rule for the *rate* itself; they are not the times of a noise
schedule (the cosine noise schedule's mask probability ``1 - cos(pi t / 2)`` at uniform ``t`` has another
distribution), so they stay a rule of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from dlmlab.config import ConfigError, require
from dlmlab.models.masks import build_mask
from dlmlab.objectives.mdlm import corrupt, masked_nll, nelbo_per_row
from dlmlab.objectives.objective import Batch, CardObjective, card_error, field_where, model_device
from dlmlab.objectives.schedule import NoiseSchedule, get_schedule, parse_schedule, uniform_times

Attention = Literal["hybrid", "bidirectional", "annealed", "hybrid_annealed", "causal"]
Loss = Literal["masked_ce", "mdlm_bound"]
LOSSES: tuple[str, ...] = ("masked_ce", "mdlm_bound")
ANNEALED = ("annealed", "hybrid_annealed")
COSINE_T_RANGE = (0.01, 0.99)  # the study's clip of the cosine mask rates


def cosine_mask_rates(batch: int, gen: torch.Generator | None) -> torch.Tensor:
    """t [B] = cos(pi u / 2) for stratified u in [0, 1), clipped to :data:`COSINE_T_RANGE` (the study's schedule)."""
    return torch.cos(uniform_times(batch, gen) * math.pi / 2).clamp(*COSINE_T_RANGE)


def prompt_length(prompt_frac: float, T: int) -> int:
    """The clean-prompt length of a window of ``T`` tokens: ``round(prompt_frac * T)`` within [1, T-1]."""
    require(0 < prompt_frac < 1, f"prompt_frac must be in (0, 1), got {prompt_frac}")
    return min(T - 1, max(1, round(prompt_frac * T)))


def final_attention(attention: str) -> str:
    """The mask used after training (sampling / evaluation): an annealed mask ends opened."""
    return {"annealed": "bidirectional", "hybrid_annealed": "hybrid"}.get(attention, attention)


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


@dataclass(eq=False)
class PrefixDiffusionObjective(CardObjective):
    """A window's first ``prompt_length(prompt_frac, seq_len)`` tokens stay clean and the rest is masked at rate
    ``t`` (the PreDiff study's diffusion methods; :func:`dlmlab.prediff.method_objective` builds one per method).

    ``attention``: the training mask (``hybrid``, ``bidirectional``, or ``annealed`` / ``hybrid_annealed``,
    opened from causal over the first ``anneal_frac * steps`` steps); ``self_cond_frac``: the share of rows
    trained with a self-conditioning first pass.  ``make_batch(tokens [B, T], gen, step=0)`` draws, in this
    order: ``t`` [B] (``masked_ce``: the cosine mask rates; ``mdlm_bound``: ``schedule``'s times), ``noise``
    [B, T] uniforms for the masks, ``self_cond`` [B] bool rows with a self-conditioning first pass, and for an
    annealed mask ``attn`` [B, 1, T, T], opened to ``min(1, step / (anneal_frac * steps))``; ``prompt_len`` [B]
    is fixed.  ``loss(model, batch)`` is :func:`diffusion_loss` on the model's device (``attn`` when drawn,
    else the final mask).  Card: ``{"objective": "prefix_diffusion", **fields, "noise": {...}}``.
    """

    seq_len: int
    steps: int
    prompt_frac: float = 0.5
    loss_name: str = "masked_ce"
    schedule: Any = None  # NoiseSchedule | str | None
    attention: str = "hybrid"
    self_cond_frac: float = 0.5
    anneal_frac: float = 0.5

    name: ClassVar[str] = "prefix_diffusion"

    def __post_init__(self) -> None:
        require(self.loss_name in LOSSES, f"loss must be one of {LOSSES}, got {self.loss_name!r}")
        require(self.attention in ("hybrid", "bidirectional", *ANNEALED),
                f"a prefix-diffusion attention must be hybrid, bidirectional or annealed, got {self.attention!r}")
        require(0 <= self.self_cond_frac <= 1, f"self_cond_frac must be in [0, 1], got {self.self_cond_frac}")
        require(0 < self.anneal_frac <= 1, f"anneal_frac must be in (0, 1], got {self.anneal_frac}")
        self.prompt_len = prompt_length(self.prompt_frac, self.seq_len)
        self.schedule = get_schedule(self.schedule)

    @property
    def final_attention(self) -> str:
        return final_attention(self.attention)

    def progress(self, step: int) -> float:
        """How far an annealed mask has opened at ``step`` (0: causal, 1: the final mask)."""
        return min(1.0, step / max(1.0, self.anneal_frac * self.steps))

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None, step: int = 0,
                   **extra: torch.Tensor) -> Batch:
        B, T = tokens.shape
        P = torch.full((B,), self.prompt_len, dtype=torch.long)
        t = cosine_mask_rates(B, gen) if self.loss_name == "masked_ce" else self.schedule.sample_t(B, gen)
        out = {"tokens": tokens, "prompt_len": P, "t": t, "noise": torch.rand(tokens.shape, generator=gen),
               "self_cond": torch.rand(B, generator=gen) < self.self_cond_frac}
        if self.attention in ANNEALED:
            out["attn"] = annealed_mask(self.attention, P, T, self.progress(step), gen)
        return {**out, **extra}

    def loss(self, model, batch: Batch) -> tuple[torch.Tensor, dict]:
        dev = model_device(model)
        b = {k: v.to(dev) for k, v in batch.items()}
        attn = b.get("attn")
        return diffusion_loss(model, b["tokens"], b["prompt_len"], b["t"], b["noise"], b["self_cond"],
                              attn_mask=attn if attn is not None else self.final_attention, loss=self.loss_name,
                              schedule=self.schedule if self.loss_name == "mdlm_bound" else None,  # masked_ce: t is the rate
                              any_self_cond=bool(batch["self_cond"].any()))  # read on the CPU batch: no device sync

    def to_card(self) -> dict:
        return {"objective": self.name, "seq_len": self.seq_len, "steps": self.steps, "prompt_frac": self.prompt_frac,
                "loss": self.loss_name, "noise": self.schedule.to_data(), "attention": self.attention,
                "self_cond_frac": self.self_cond_frac, "anneal_frac": self.anneal_frac}

    @classmethod
    def from_card(cls, card: dict, where: str = "model.json") -> "PrefixDiffusionObjective":
        try:
            noise = card.get("noise")
            return cls(card["seq_len"], card["steps"], card.get("prompt_frac", 0.5), card.get("loss", "masked_ce"),
                       None if noise is None else parse_schedule(noise, field_where(where, "noise")),
                       card.get("attention", "hybrid"), card.get("self_cond_frac", 0.5), card.get("anneal_frac", 0.5))
        except (ConfigError, KeyError, TypeError) as e:
            raise card_error(where, e) from None


def diffusion_loss(model, tokens: torch.Tensor, prompt_len: torch.Tensor, t: torch.Tensor, noise: torch.Tensor,
                   self_cond_rows: torch.Tensor | None = None, attn_mask=None,
                   loss: Loss = "mdlm_bound", schedule: NoiseSchedule | None = None,
                   any_self_cond: bool | None = None) -> tuple[torch.Tensor, dict]:
    """Training loss for windows ``tokens`` [B,T] with prompts of ``prompt_len`` [B] at mask rates ``t`` [B].

    ``loss="mdlm_bound"``: the MDLM NELBO per target token (its mean over rows; ``exp`` is the ELBO
    perplexity bound when ``t ~ U[eps, 1]``); ``loss="masked_ce"``: mean cross-entropy over the masked
    tokens of the batch.  ``self_cond_rows`` [B] bool: rows that first run a no-grad pass and feed its soft
    prediction back (zeros elsewhere), as in self-conditioning training (``any_self_cond``: whether any row
    does, when the caller knows it without a device sync).  ``schedule``: the noise schedule giving the mask
    probability and ELBO weight of ``t`` (default linear: ``t`` itself and ``1/t``).
    Returns (loss, metrics); metrics (0-d tensors) carry ``nelbo`` (nats / target token, per row mean),
    ``ppl_bound`` and ``masked_ce``.
    """
    nelbo_rows, ce = masked_losses(model, tokens, prompt_len, t, noise, self_cond_rows, attn_mask,
                                   schedule=schedule, any_self_cond=any_self_cond)
    nelbo = nelbo_rows.mean()
    value = nelbo if loss == "mdlm_bound" else ce
    nelbo_d = nelbo.detach()
    return value, {"loss": value.detach(), "nelbo": nelbo_d, "ppl_bound": torch.exp(nelbo_d), "masked_ce": ce.detach()}


def masked_losses(model, tokens, prompt_len, t, noise, self_cond_rows=None, attn_mask=None,
                  self_cond: bool = True, schedule: NoiseSchedule | None = None,
                  any_self_cond: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (NELBO per row [B]: w(t) * masked NLL / n_target, mean CE over the batch's masked tokens [])."""
    sched = get_schedule(schedule)
    B, T = tokens.shape
    inner = getattr(model, "module", model)  # DDP wraps the PreDiffLM
    pos = torch.arange(T, device=tokens.device)
    maskable = pos[None, :] >= prompt_len[:, None].to(tokens.device)
    noisy, masked = corrupt(tokens, t, inner.mask_id, maskable=maskable, noise=noise, schedule=sched)
    kw = dict(prompt_len=prompt_len, attn_mask=attn_mask)
    sc = None
    if self_cond and inner.uses_self_cond and self_cond_rows is not None and (
            any_self_cond if any_self_cond is not None else bool(self_cond_rows.any())):
        with torch.no_grad():
            first = model(noisy, t, **kw)
        sc = inner.soft_prediction(first) * self_cond_rows.to(first.device)[:, None, None].float()
    logits = model(noisy, t, self_cond=sc, **kw)
    nll = masked_nll(logits, tokens, masked, inner.mask_id)  # [B,T], zero off the masked positions
    n = maskable.sum(1).clamp(min=1)
    return nelbo_per_row(nll, t, n, sched), nll.sum() / masked.sum().clamp(min=1)


__all__ = ["PrefixDiffusionObjective", "diffusion_loss", "masked_losses", "annealed_mask", "cosine_mask_rates",
           "prompt_length", "final_attention", "LOSSES", "COSINE_T_RANGE"]
