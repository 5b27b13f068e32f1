"""Normalisation layers: LayerNorm, RMSNorm, or identity ("none").

``make_norm(..., hooked=True)`` (the Transformer's norms) gives norms with TransformerLens's two hook points
inside: ``scale`` [B,T,1] (the per-token scale the input is divided by) and ``normalized`` [B,T,D] (the
input centred (LayerNorm) and divided by it, before the weight and bias).  Both are opt-in (left out of
``names=None``); unhooked, the norm runs its fused kernel as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dlmlab.interp.hooks import HookPoint
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


class _NormHooks:
    """The ``scale`` / ``normalized`` hook points of a hooked norm, and its slow path when one is hooked."""

    center = True

    def _add_hooks(self) -> None:
        self.scale, self.normalized = HookPoint(opt_in=True), HookPoint(opt_in=True)

    def _hooked_forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        dtype = x.dtype
        x32 = upcast(x)
        if self.center:
            x32 = x32 - x32.mean(-1, keepdim=True)
        scale = self.scale((x32.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        normed = self.normalized(x32 / scale)
        out = normed * self.weight if self.weight is not None else normed
        return (out + bias if bias is not None else out).to(dtype)


class HookedLayerNorm(_NormHooks, nn.LayerNorm):
    """``nn.LayerNorm`` (same parameters and state dict) with the ``scale`` and ``normalized`` hook points."""

    def __init__(self, d: int, eps: float, bias: bool = True) -> None:
        nn.LayerNorm.__init__(self, d, eps=eps, bias=bias)
        self._add_hooks()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.scale.active or self.normalized.active):
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return self._hooked_forward(x, self.bias)


class HookedRMSNorm(_NormHooks, RMSNorm):
    """:class:`RMSNorm` with the ``scale`` and ``normalized`` hook points."""

    center = False

    def __init__(self, d: int, eps: float) -> None:
        RMSNorm.__init__(self, d, eps)
        self._add_hooks()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.scale.active or self.normalized.active):
            return RMSNorm.forward(self, x)
        return self._hooked_forward(x, None)


def make_norm(kind: str, d: int, eps: float, bias: bool = True, hooked: bool = False) -> nn.Module:
    if kind == "layernorm":
        return HookedLayerNorm(d, eps, bias) if hooked else nn.LayerNorm(d, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return HookedRMSNorm(d, eps) if hooked else RMSNorm(d, eps)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}")
