"""Absorbing-mask diffusion objective (MDLM) and the user-given-mask variant.

The mask token is the last id of the model vocabulary (``mask_id = vocab - 1``
by convention: data vocab + 1).  The model never predicts the mask token
(its logit is set to -inf, the SUBS parametrisation).  The noise schedule is a
:class:`~dlmlab.objectives.schedule.NoiseSchedule` (default: linear, ``t ~ U[1e-3, 1]``).
"""

from __future__ import annotations

import torch

from dlmlab.objectives.schedule import NoiseSchedule, get_schedule


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
    """MDLM NELBO per token for clean ``tokens`` [B,T].

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
    return loss, {"loss": loss.item(), "nelbo": loss.item(), "ppl_bound": float(torch.exp(loss.detach())),
                  "masked_ce": ce.item()}


def given_mask_loss(model, tokens: torch.Tensor, masked: torch.Tensor, mask_id: int, **forward_kwargs) -> tuple[torch.Tensor, dict]:
    """Cross-entropy on the positions a user chose (``masked`` [B,T] bool), replaced by the mask token.

    Used for forward-only training (e.g. the model sees "[M] is B" and must recover A).
    """
    noisy = torch.where(masked, torch.full_like(tokens, mask_id), tokens)
    logits = model(noisy, **forward_kwargs)
    nll = masked_nll(logits, tokens, masked, mask_id)
    loss = nll.sum() / masked.sum().clamp(min=1)
    return loss, {"loss": loss.item()}


@torch.no_grad()
def elbo_bound(model, tokens: torch.Tensor, mask_id: int, n_samples: int = 8, seed: int = 0,
               schedule: NoiseSchedule | None = None, **forward_kwargs) -> float:
    """Monte-Carlo NELBO per token (nats) averaged over ``n_samples`` antithetic draws of t (``schedule``: default linear)."""
    g = torch.Generator().manual_seed(seed)
    vals = [mdlm_loss(model, tokens, mask_id, generator=g, schedule=schedule, **forward_kwargs)[0].item()
            for _ in range(n_samples)]
    return sum(vals) / len(vals)
