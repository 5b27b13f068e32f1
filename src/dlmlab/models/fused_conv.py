"""Causal depthwise Conv1D + SiLU of the Mamba block, fused, in the [B,T,Di] layout.

``u = silu(conv1d(x))`` with ``conv1d`` an ``nn.Conv1d(Di, Di, K, groups=Di, padding=K-1)``
cut to the first T outputs (causal): ``x`` [B,T,Di] -> ``u`` [B,T,Di].  The C++ kernel (in
csrc/selective_scan.cpp, built with the fused scan) works on rows of ``x`` directly, so the
transposes to and from [B,Di,T] and their copies disappear; ``x`` may be a strided view such as
one half of ``in_proj``'s output.  The weight and bias gradients are summed per batch row and
then in a fixed order.  Falls back to ``nn.Conv1d`` + SiLU (same result) when the kernel is
unavailable or the inputs are not float32/float64 CPU tensors of one dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dlmlab.models.fused_scan import load_extension


def reference_conv_silu(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """``silu(causal depthwise conv(x))`` with ``nn.Conv1d`` (x [B,T,Di] -> [B,T,Di])."""
    return F.silu(conv(x.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2))


class _ConvSilu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        wt = weight[:, 0, :].t().contiguous()  # [K,Di]
        ctx.save_for_backward(x, wt, bias)
        return load_extension().conv_silu_forward(x, wt, bias)

    @staticmethod
    def backward(ctx, gu):
        x, wt, bias = ctx.saved_tensors
        gx, gsum = load_extension().conv_silu_backward(x, wt, bias, gu.contiguous())
        return gx, gsum[:-1].t().unsqueeze(1), gsum[-1]


def conv_silu(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """Fused ``silu(causal depthwise conv(x))``; x [B,T,Di] (rows contiguous) -> [B,T,Di]."""
    w, b = conv.weight, conv.bias
    usable = (x.dim() == 3 and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
              and w.dtype == x.dtype and w.device.type == "cpu" and conv.groups == x.shape[2] == w.shape[0]
              and (b is None or b.dtype == x.dtype))
    if not usable or x.shape[1] == 0 or load_extension() is None:
        return reference_conv_silu(x, conv)
    if x.stride(2) != 1:
        x = x.contiguous()
    return _ConvSilu.apply(x, w, b if b is not None else x.new_zeros(x.shape[2]))
