"""The per-token scale of a norm, seen from outside: one implementation for the cache, folds and analyses.

A pre-norm sublayer reads ``N(x) = w * P x / sigma(x) + b`` (``P`` centres for LayerNorm and is the
identity for RMSNorm; ``sigma`` the per-token scale).  :func:`norm_scale` computes ``sigma`` as the
norm does; :func:`scale_like_norm` applies ``w * P x / s`` for a given ``s`` (linear in ``x``, so the
parts of a residual stream map to parts of the norm's output);  :class:`FrozenScaleNorm` is a norm
whose scale is a constant (:func:`dlmlab.analysis.fold.freeze_norm_scales`).
Used by the models' protocol methods (:class:`dlmlab.models.protocol.ProtocolMethods`, which
:meth:`dlmlab.interp.activation_cache.ActivationCache.apply_ln_to_stack` calls), :mod:`dlmlab.analysis.fold` and
:mod:`dlmlab.studies.reversal.storage_routing`.
"""

from __future__ import annotations

import torch
from torch import nn

from dlmlab.errors import UserError
from dlmlab.models.norm import RMSNorm
from dlmlab.models.precision import upcast


class FrozenScaleNorm(nn.Module):
    """``w * (x - mean(x)) / s + b`` (LayerNorm) or ``w * x / s`` (RMSNorm) with a constant scale s."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, scale: float, center: bool) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().clone())
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.scale, self.center = float(scale), center

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.center:
            x = x - x.mean(-1, keepdim=True)
        y = self.weight * x / self.scale
        return y + self.bias if self.bias is not None else y


def norm_params(norm: nn.Module) -> tuple[torch.Tensor | None, torch.Tensor | None, bool, float]:
    """(weight or None, bias or None, centres?, eps) of a LayerNorm / RMSNorm / FrozenScaleNorm."""
    if isinstance(norm, nn.LayerNorm):
        w = None if norm.weight is None else norm.weight.detach()
        return w, None if norm.bias is None else norm.bias.detach(), True, norm.eps
    if isinstance(norm, RMSNorm):
        return norm.weight.detach(), None, False, norm.eps
    if isinstance(norm, FrozenScaleNorm):
        return norm.weight, norm.bias, norm.center, 0.0
    raise UserError(f"cannot use a {type(norm).__name__} as a norm here; only LayerNorm and RMSNorm "
                    "(and their frozen-scale copies) are supported")


def norm_scale(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The per-token scale ``sigma`` [...] that ``norm`` divides ``x`` [..., D] by.

    LayerNorm: ``sqrt(var(x) + eps)`` (biased variance); RMSNorm: ``sqrt(mean(x^2) + eps)``;
    a frozen-scale norm: its constant; ``nn.Identity`` (no norm): 1.  Computed in at least float32
    (float64 stays float64)."""
    if isinstance(norm, nn.Identity):
        return torch.ones(x.shape[:-1], dtype=upcast(x[..., :1]).dtype, device=x.device)
    if isinstance(norm, FrozenScaleNorm):
        return torch.full(x.shape[:-1], norm.scale, dtype=upcast(x[..., :1]).dtype, device=x.device)
    _, _, center, eps = norm_params(norm)
    x = upcast(x)
    if center:
        x = x - x.mean(-1, keepdim=True)
    return (x.pow(2).mean(-1) + eps).sqrt()


def scale_like_norm(norm: nn.Module, x: torch.Tensor, scale: torch.Tensor, weight: bool = True) -> torch.Tensor:
    """``w * P x / scale`` for ``x`` [..., D] and a given ``scale`` broadcastable to ``x.shape[:-1]``:
    the norm's output without its bias (linear in x for a fixed scale, so a sum of parts maps to the
    sum of their images).  ``weight=False``: ``P x / scale`` (TransformerLens's ``apply_ln_to_stack``)."""
    if isinstance(norm, nn.Identity):
        return x / scale[..., None].to(x.dtype)
    w, _, center, _ = norm_params(norm)
    if center:
        x = x - x.mean(-1, keepdim=True)
    y = x / scale[..., None].to(x.dtype)
    return y * w.to(y.dtype) if w is not None and weight else y
