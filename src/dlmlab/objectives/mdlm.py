"""Absorbing-mask diffusion objective (MDLM): :class:`MaskedDiffusionObjective`, its function form
:func:`mdlm_loss`, and the user-given-mask cross-entropy :func:`given_mask_loss`.

The mask token is the last id of the model vocabulary (``mask_id = vocab - 1``
by convention: data vocab + 1).  The model never predicts the mask token
(its logit is set to -inf, the SUBS parametrisation).  The noise schedule is a
:class:`~dlmlab.objectives.schedule.NoiseSchedule` (default: linear, ``t ~ U[1e-3, 1]``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from typing import Any, ClassVar

from dlmlab.config import ConfigError, require
from dlmlab.errors import UserError
from dlmlab.objectives.objective import Batch, CardObjective, card_error, check_t_range, field_where, model_device
from dlmlab.objectives.schedule import NoiseSchedule, get_schedule, parse_schedule, uniform_times


def corrupt(tokens: torch.Tensor, t: torch.Tensor, mask_id: int, generator=None,
            maskable: torch.Tensor | None = None, noise: torch.Tensor | None = None,
            schedule: NoiseSchedule | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask each token independently with probability ``schedule.mask_prob(t[b])`` -> (noisy [B,T], masked bool [B,T]).

    ``maskable`` [B,T] bool restricts corruption (e.g. to the target of a prompt/target pair).
    ``noise`` [B,T] uniforms may be given (pre-drawn for a whole global batch) instead of a generator.
    """
    u = noise if noise is not None else torch.rand(tokens.shape, generator=generator)
    u = u.to(tokens.device)
    masked = u < get_schedule(schedule).mask_prob(t)[:, None].to(tokens.device)
    if maskable is not None:
        masked = masked & maskable
    return torch.where(masked, torch.full_like(tokens, mask_id), tokens), masked


def log_probs_no_mask(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """log-softmax over the vocabulary with the mask token excluded."""
    logits = logits.clone()
    logits[..., mask_id] = float("-inf")
    return logits.log_softmax(dim=-1)


def masked_nll(logits: torch.Tensor, tokens: torch.Tensor, masked: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Per-position NLL [B,T] of the clean token, zero where not masked."""
    logp = log_probs_no_mask(logits, mask_id)
    nll = -logp.gather(-1, tokens[..., None]).squeeze(-1)
    return nll * masked


def nelbo_per_row(nll: torch.Tensor, t: torch.Tensor, n: torch.Tensor, schedule: NoiseSchedule) -> torch.Tensor:
    """NELBO per row [B]: ``w(t_b) * sum_i nll_bi / n_b`` for masked-token NLLs ``nll`` [B,T] (zero elsewhere),
    times ``t`` [B] and ``n`` [B] scored positions, ``w`` the schedule's ELBO weight."""
    return schedule.elbo_weight(t).to(nll.device) * nll.sum(1) / n


def mdlm_loss(
    model,
    tokens: torch.Tensor,
    mask_id: int,
    generator: torch.Generator | None = None,
    t: torch.Tensor | None = None,
    maskable: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    eps: float = 1e-3,
    schedule: NoiseSchedule | None = None,
    **forward_kwargs,
) -> tuple[torch.Tensor, dict]:
    """MDLM NELBO per token for clean ``tokens`` [B,T]; metrics ``loss``, ``nelbo``, ``ppl_bound``, ``masked_ce``
    as 0-d tensors (no host sync).

    loss = mean_b [ w(t_b) * sum_i masked_bi * NLL_bi ] / n_b, with w the schedule's ELBO weight
    ``-alpha'(t) / (1 - alpha(t))`` (1/t for the linear schedule) and n_b the number of maskable
    positions: an upper bound on the data NLL per token, so exp(loss) is the ELBO perplexity bound.
    ``schedule``: a :class:`NoiseSchedule` (default: linear with ``t ~ U[eps, 1]``; ``eps`` is ignored
    when a schedule is given).
    """
    B, T = tokens.shape
    sched = schedule if schedule is not None else get_schedule("linear", eps=eps)
    if t is None:
        t = sched.sample_t(B, generator).to(tokens.device)
    noisy, masked = corrupt(tokens, t, mask_id, generator, maskable, noise, sched)
    logits = model(noisy, **forward_kwargs)
    nll = masked_nll(logits, tokens, masked, mask_id)
    n = maskable.sum(1).clamp(min=1) if maskable is not None else torch.full((B,), T, device=tokens.device)
    loss = nelbo_per_row(nll, t, n, sched).mean()
    n_masked = masked.sum().clamp(min=1)
    ce = (nll.sum() / n_masked).detach()
    value = loss.detach()
    return loss, {"loss": value, "nelbo": value, "ppl_bound": torch.exp(value), "masked_ce": ce}


def given_mask_loss(model, tokens: torch.Tensor, masked: torch.Tensor, mask_id: int, **forward_kwargs) -> tuple[torch.Tensor, dict]:
    """Cross-entropy on the positions a user chose (``masked`` [B,T] bool), replaced by the mask token.

    Used for forward-only training (e.g. the model sees "[M] is B" and must recover A).
    """
    noisy = torch.where(masked, torch.full_like(tokens, mask_id), tokens)
    logits = model(noisy, **forward_kwargs)
    nll = masked_nll(logits, tokens, masked, mask_id)
    loss = nll.sum() / masked.sum().clamp(min=1)
    return loss, {"loss": loss.detach()}


@torch.no_grad()
def elbo_bound(model, tokens: torch.Tensor, mask_id: int, n_samples: int = 8, seed: int = 0,
               schedule: NoiseSchedule | None = None, **forward_kwargs) -> float:
    """Monte-Carlo NELBO per token (nats) averaged over ``n_samples`` antithetic draws of t (``schedule``: default linear)."""
    g = torch.Generator().manual_seed(seed)
    vals = [mdlm_loss(model, tokens, mask_id, generator=g, schedule=schedule, **forward_kwargs)[0].item()
            for _ in range(n_samples)]
    return sum(vals) / len(vals)


@dataclass(eq=False)
class MaskedDiffusionObjective(CardObjective):
    """Absorbing-mask diffusion (MDLM): batch ``{"tokens", "t", "noise"}``, loss the NELBO per token.

    ``schedule``: the :class:`~dlmlab.objectives.schedule.NoiseSchedule` (a name, an instance, or None for the
    default linear one): mask probability and ELBO weight of ``t``, and where ``t`` is drawn, ``[t_min, 1]``.
    ``t_range`` ``(lo, hi)``: draw ``t`` uniformly on ``[lo, hi]`` instead (antithetic, as the schedule's own
    draw), e.g. the induction study's narrower mask rates.  ``pad_id``: tokens equal to it are never masked
    and not counted.  Card: ``{"objective": "mdlm", "mask_id", "noise": {"name", ...}, "t_range", "pad_id"}``.

    The mask token is the one id the objective adds to the tokenizer's vocabulary (``added_ids``):
    ``mask_id=None`` (a run config's objective, before the vocabulary is known) is assigned by
    :meth:`for_vocab` as the id just past the tokenizer's.
    """

    mask_id: int | None = None
    schedule: Any = None  # NoiseSchedule | str | None (turned into a NoiseSchedule)
    t_range: tuple[float, float] | None = None
    pad_id: int | None = None

    name: ClassVar[str] = "mdlm"
    added_ids: ClassVar[int] = 1
    denoises: ClassVar[bool] = True

    def __post_init__(self) -> None:
        require(self.mask_id is None or (isinstance(self.mask_id, int) and not isinstance(self.mask_id, bool)
                                         and self.mask_id >= 0),
                f"mask_id must be a token id >= 0, got {self.mask_id!r}")
        require(self.pad_id is None or (isinstance(self.pad_id, int) and not isinstance(self.pad_id, bool)),
                f"pad_id must be a token id or null, got {self.pad_id!r}")
        self.schedule = get_schedule(self.schedule)
        if self.t_range is not None:
            self.t_range = check_t_range(self.t_range)

    def for_vocab(self, data_vocab: int) -> "MaskedDiffusionObjective":
        """The mask token is ``data_vocab``, the id just past the tokenizer's (kept when already set)."""
        return self if self.mask_id is not None else dataclasses.replace(self, mask_id=int(data_vocab))

    def sample_t(self, batch: int, gen: torch.Generator | None) -> torch.Tensor:
        """Times [B]: the schedule's draw on ``[t_min, 1]``, or uniform on ``t_range`` (both antithetic)."""
        if self.t_range is None:
            return self.schedule.sample_t(batch, gen)
        lo, hi = self.t_range
        return lo + (hi - lo) * uniform_times(batch, gen)

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None, step: int = 0,
                   **extra: torch.Tensor) -> Batch:
        """``tokens`` [B, T] -> ``{"tokens", "t" [B], "noise" [B, T] uniforms, **extra}`` (t drawn first); a ``t`` or
        ``noise`` given in ``extra`` (a pre-drawn batch) replaces the drawn one."""
        t = self.sample_t(tokens.shape[0], gen)
        return {"tokens": tokens, "t": t, "noise": torch.rand(tokens.shape, generator=gen), **extra}

    def loss(self, model, batch: Batch, **forward_kwargs) -> tuple[torch.Tensor, dict]:
        if self.mask_id is None:
            raise UserError("MaskedDiffusionObjective has no mask_id yet; give one, or call for_vocab(vocab)")
        dev = model_device(model)
        x = batch["tokens"].to(dev)
        maskable = x != self.pad_id if self.pad_id is not None else None
        return mdlm_loss(model, x, self.mask_id, t=batch["t"].to(dev), noise=batch["noise"].to(dev),
                         maskable=maskable, schedule=self.schedule, **forward_kwargs)

    def to_card(self) -> dict:
        return {"objective": self.name, "mask_id": self.mask_id, "noise": self.schedule.to_data(),
                "t_range": None if self.t_range is None else list(self.t_range), "pad_id": self.pad_id}

    @classmethod
    def from_card(cls, card: dict, where: str = "model.json") -> "MaskedDiffusionObjective":
        """A card without ``noise`` (written before runs recorded one) means the default linear schedule."""
        noise = card.get("noise")
        schedule = None if noise is None else parse_schedule(noise, field_where(where, "noise"))
        t_range = card.get("t_range")
        if t_range is not None:
            t_range = check_t_range(t_range, field_where(where, "t_range"))
        try:
            return cls(card.get("mask_id"), schedule, t_range, card.get("pad_id"))
        except ConfigError as e:
            raise card_error(where, e) from None
