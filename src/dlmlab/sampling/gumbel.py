"""Token selection shared by the samplers: temperature, nucleus (top-p), Gumbel-max in float64."""

from __future__ import annotations

import torch


TOP_P_CANDIDATES = 64


def top_p_filter(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Log-probs [..., V] -> the same with tokens outside the smallest set of mass >= top_p set to -inf.

    When the ``TOP_P_CANDIDATES`` most probable tokens of every row already hold ``top_p`` of the mass,
    only they are sorted (same result: every later token is dropped anyway)."""
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_p >= 1:
        return logp
    k = min(logp.shape[-1], TOP_P_CANDIDATES)
    sorted_lp, idx = logp.topk(k, dim=-1)  # the nucleus usually lies in the top k: sort only those
    cum = sorted_lp.exp().cumsum(-1)
    if k < logp.shape[-1] and not bool((cum[..., -1] >= top_p).all()):
        sorted_lp, idx = logp.sort(dim=-1, descending=True)
        cum = sorted_lp.exp().cumsum(-1)
    drop = (cum - sorted_lp.exp()) >= top_p  # keep a token if the mass before it is < top_p (the top one always)
    sorted_lp = sorted_lp.masked_fill(drop, float("-inf"))
    return torch.full_like(logp, float("-inf")).scatter(-1, idx, sorted_lp)


def filtered_log_probs(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                       banned: int | None = None) -> torch.Tensor:
    """logits [..., V] -> float64 log-probs [..., V] of the distribution tokens are drawn from.

    ``temperature = 0`` gives the plain softmax (greedy decoding takes its argmax); otherwise
    temperature-scaled, nucleus-filtered and renormalised.  ``banned``: an id with probability 0.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    lg = logits.double()
    if banned is not None:
        lg = lg.clone()
        lg[..., banned] = float("-inf")
    if temperature == 0:
        return lg.log_softmax(-1)
    logp = top_p_filter((lg / temperature).log_softmax(-1), top_p)
    return logp.log_softmax(-1)  # renormalise after filtering


def draw(logp: torch.Tensor, temperature: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Log-probs [..., V] -> token ids [...]: argmax when ``temperature == 0``, else Gumbel-max (float64)."""
    if temperature == 0:
        return logp.argmax(-1)
    u = torch.rand(logp.shape, generator=generator, dtype=torch.float64, device="cpu").to(logp.device)
    gumbel = -torch.log(-torch.log(u.clamp(min=1e-300)))
    return (logp + gumbel).argmax(-1)


def sample_from_logits(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0,
                       generator: torch.Generator | None = None, banned: int | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [..., V] -> (token ids [...], probability of each chosen token under the filtered distribution [...]).

    Computed in float64 (Gumbel noise included: float32 Gumbel-max is biased towards
    low-probability tokens).  ``temperature = 0`` is greedy.  ``banned``: an id never
    drawn (the mask token).
    """
    logp = filtered_log_probs(logits, temperature, top_p, banned)
    tok = draw(logp, temperature, generator)
    return tok, logp.gather(-1, tok[..., None]).squeeze(-1).exp()
