"""Positional schemes: learned absolute, rotary (RoPE, GPT-NeoX/Llama half-split) and ALiBi."""

from __future__ import annotations

import functools
import math

import torch

from dlmlab.models.precision import compute_dtype


def rope_cos_sin(
    positions: torch.Tensor, d_head: int, theta: float, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables for ``positions`` [T] -> each [T, d_head] (halves duplicated).

    Built in ``dtype`` (the activations' dtype), at least float32: float64 models get float64 tables.
    """
    work = compute_dtype(dtype)
    inv = 1.0 / (theta ** (torch.arange(0, d_head, 2, device=positions.device, dtype=work) / d_head))
    ang = positions.to(work)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [B, H, T, d_head] with tables [T, d_head] (rotate-half convention)."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos.to(x.dtype) + rot * sin.to(x.dtype))


@functools.lru_cache(maxsize=32)
def alibi_slopes(n_heads: int, dtype: torch.dtype = torch.float32, device: torch.device | None = None) -> torch.Tensor:
    """Per-head ALiBi slopes [H] (Press et al.; geometric, handles non powers of 2).

    In ``dtype`` (at least float32) on ``device``; cached, so treat the result as read-only.
    """

    def pow2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        s = pow2(n_heads)
    else:
        closest = 2 ** math.floor(math.log2(n_heads))
        s = pow2(closest) + pow2(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(s, dtype=compute_dtype(dtype), device=device)


def alibi_bias(slopes: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """Additive bias [H, Tq, Tk] = -slope * |i - j| (symmetric, so it also serves bidirectional)."""
    dist = (q_pos[:, None] - k_pos[None, :]).abs().float()
    return -slopes[:, None, None].to(dist.device) * dist[None]
