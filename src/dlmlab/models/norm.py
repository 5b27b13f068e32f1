"""Normalisation layers: LayerNorm, RMSNorm, or identity ("none")."""

from __future__ import annotations

import torch
from torch import nn

from dlmlab.models.precision import upcast


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = upcast(x)  # half -> float32; float64 stays float64
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def make_norm(kind: str, d: int, eps: float, bias: bool = True) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(d, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return RMSNorm(d, eps)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}")
