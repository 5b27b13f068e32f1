"""Unmasking orders: which still-masked positions a denoising step commits first.

Every order maps the filtered distribution at each candidate position to a score (higher =
commit sooner):

* ``confidence``: probability of the drawn token (LLaDA's low-confidence remasking; the top-1
  probability when decoding greedily);
* ``margin``: top-1 minus top-2 probability (Dream's ``topk_margin``);
* ``entropy``: minus the entropy of the distribution (Dream's ``entropy``);
* ``random``: a uniform draw (MDLM's ancestral order).
"""

from __future__ import annotations

from typing import Literal

import torch

Order = Literal["confidence", "margin", "entropy", "random"]
ORDERS: tuple[str, ...] = ("confidence", "margin", "entropy", "random")


def entropy(logp: torch.Tensor) -> torch.Tensor:
    """Log-probs [..., V] -> entropy in nats [...] (zero-probability tokens contribute 0)."""
    p = logp.exp()
    return -(p * logp.masked_fill(p == 0, 0.0)).sum(-1)


def order_scores(order: str, logp: torch.Tensor, tok: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Filtered log-probs [N,V] and drawn tokens [N] -> float64 scores [N] (higher = commit first)."""
    if order == "confidence":
        return logp.gather(-1, tok[:, None]).squeeze(-1).exp()
    if order == "margin":
        top2 = logp.exp().topk(min(2, logp.shape[-1]), dim=-1).values
        return top2[:, 0] - (top2[:, 1] if top2.shape[1] > 1 else 0.0)
    if order == "entropy":
        return -entropy(logp)
    if order == "random":
        return torch.rand(tok.shape, generator=generator, dtype=torch.float64, device="cpu").to(logp.device)
    raise ValueError(f"unknown order {order!r} (use one of {', '.join(ORDERS)})")
