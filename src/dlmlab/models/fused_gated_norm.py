"""Gated RMSNorm of the Mamba-2 block, fused: a C++ kernel (in csrc/ssd_scan.cpp, built with the SSD scan).

``out = weight * rmsnorm(y * silu(z))`` over groups of ``group_size`` of the last dim, the same
function as :class:`dlmlab.models.mamba2.GatedRMSNorm` (HF ``MambaRMSNormGated``): ``y, z``
[..., D], ``weight`` [D] -> [..., D].  Forward and backward are one pass over the rows each
(autograd would keep about seven [..., D] intermediates); ``z`` may be a strided view such as a
slice of ``in_proj``'s output.  The weight gradient is summed per block of rows and then over
the blocks in order, so results do not depend on the thread count.  Falls back to
:func:`reference_gated_norm` (same result up to rounding) when the kernel is unavailable or the
inputs are not float32/float64 CPU tensors of one dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dlmlab.models.ssd_fused import load_extension


def reference_gated_norm(y, z, weight, group_size: int, eps: float) -> torch.Tensor:
    """``weight * rmsnorm(y * silu(z))`` per group of ``group_size`` in PyTorch (y, z [..., D])."""
    h = y * F.silu(z)
    h = h.unflatten(-1, (-1, group_size))
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).flatten(-2)


class _GatedNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, z, weight, group_size: int, eps: float):
        out, rstd = load_extension().gated_norm_forward(y, z, weight, group_size, eps)
        ctx.save_for_backward(y, z, weight, rstd)
        ctx.group_size = group_size
        return out

    @staticmethod
    def backward(ctx, go):
        y, z, weight, rstd = ctx.saved_tensors
        gy, gz, gw = load_extension().gated_norm_backward(y, z, weight, rstd, go.contiguous(), ctx.group_size)
        return gy, gz, gw, None, None


def gated_norm(y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, group_size: int, eps: float) -> torch.Tensor:
    """Fused ``weight * rmsnorm(y * silu(z))`` per group of ``group_size``; y, z [..., D], weight [D] -> [..., D]."""
    D = y.shape[-1]
    if z.shape != y.shape or tuple(weight.shape) != (D,) or group_size < 1 or D % group_size:
        raise ValueError(f"need y, z [..., D] of one shape, weight [D] and D a multiple of group_size; got "
                         f"{tuple(y.shape)}, {tuple(z.shape)}, {tuple(weight.shape)}, group_size {group_size}")
    usable = ({t.dtype for t in (y, z, weight)} in ({torch.float32}, {torch.float64})
              and all(t.device.type == "cpu" for t in (y, z, weight)))
    if not usable or y.numel() == 0 or load_extension() is None:
        return reference_gated_norm(y, z, weight, group_size, eps)
    y2, z2 = y.reshape(-1, D), z.reshape(-1, D)
    y2 = y2 if y2.stride(-1) == 1 else y2.contiguous()
    z2 = z2 if z2.stride(-1) == 1 else z2.contiguous()
    return _GatedNorm.apply(y2, z2, weight.contiguous(), group_size, eps).reshape(y.shape)
