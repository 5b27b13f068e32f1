"""Absorbing-mask noise schedule (MDLM, Sahoo et al. 2024), linear in t.

alpha(t) = 1 - t is the probability a token is still clean at time t in [0, 1];
a token is masked with probability 1 - alpha(t) = t.  The continuous-time
NELBO weight on a masked token's cross-entropy is -alpha'(t) / (1 - alpha(t)) = 1/t.
"""

from __future__ import annotations

import torch


def alpha(t: torch.Tensor) -> torch.Tensor:
    return 1.0 - t


def mask_prob(t: torch.Tensor) -> torch.Tensor:
    return 1.0 - alpha(t)


def elbo_weight(t: torch.Tensor) -> torch.Tensor:
    """-alpha'(t) / (1 - alpha(t)) for the linear schedule = 1 / t."""
    return 1.0 / t


def sample_t(batch: int, generator: torch.Generator | None, eps: float = 1e-3, antithetic: bool = True) -> torch.Tensor:
    """t [B] in [eps, 1]; antithetic (stratified) sampling lowers the loss variance."""
    u = torch.rand(1 if antithetic else batch, generator=generator)
    if antithetic:
        u = (u + torch.arange(batch) / batch) % 1.0
    return eps + (1.0 - eps) * u
