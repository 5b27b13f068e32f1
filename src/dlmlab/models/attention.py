"""Multi-head self-attention with hook points and an SDPA fast path.

Hook points (TransformerLens conventions, shapes per call):
  q, k, v   [B, T, H, d_head]   (before RoPE)
  pattern   [B, H, Tq, Tk]      (softmax probabilities; hooking it forces the explicit path)
  z         [B, T, H, d_head]   (pattern-weighted values)
  head_out  [B, T, H, d_model]  (per-head output; only materialised when hooked)
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from dlmlab.interp.hooks import HookPoint
from dlmlab.models.config import TransformerConfig
from dlmlab.models.kv_cache import KVCache
from dlmlab.models.positions import apply_rope


@functools.lru_cache(maxsize=32)
def causal_bias(T: int, Tk: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Additive causal mask [T, Tk] (0 / -inf) for queries at the last T of Tk positions; cached, read-only."""
    keep = torch.ones(T, Tk, dtype=torch.bool, device=device).tril(Tk - T)
    return torch.zeros(T, Tk, dtype=dtype, device=device).masked_fill_(~keep, float("-inf"))


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        inner = cfg.n_heads * cfg.d_head
        qkv_bias = cfg.bias or cfg.qkv_bias
        self.W_q = nn.Linear(cfg.d_model, inner, bias=qkv_bias)
        self.W_k = nn.Linear(cfg.d_model, inner, bias=qkv_bias)
        self.W_v = nn.Linear(cfg.d_model, inner, bias=qkv_bias)
        self.W_o = nn.Linear(inner, cfg.d_model, bias=cfg.bias)
        self.scale = cfg.d_head**-0.5
        self.q, self.k, self.v = HookPoint(), HookPoint(), HookPoint()
        self.pattern, self.z = HookPoint(), HookPoint()
        self.head_out = HookPoint(opt_in=True)  # [B,T,H,D]: costly, left out of names=None

    # Per-head weight views for circuit analysis -------------------------------------------
    def head_weights(self) -> dict[str, torch.Tensor]:
        """W_Q, W_K, W_V: [H, D, d_head]; W_O: [H, d_head, D]; biases b_Q/b_K/b_V [H, d_head], b_O [D].

        A missing bias (``bias=False`` without ``qkv_bias``) is returned as zeros.
        """
        H, dh = self.n_heads, self.d_head
        D = self.W_q.in_features
        like = {"dtype": self.W_q.weight.dtype, "device": self.W_q.weight.device}

        def split_in(lin: nn.Linear) -> torch.Tensor:
            return lin.weight.T.reshape(D, H, dh).permute(1, 0, 2)

        def split_b(lin: nn.Linear) -> torch.Tensor:
            return lin.bias.reshape(H, dh) if lin.bias is not None else torch.zeros(H, dh, **like)

        out = {
            "W_Q": split_in(self.W_q),
            "W_K": split_in(self.W_k),
            "W_V": split_in(self.W_v),
            "W_O": self.W_o.weight.T.reshape(H, dh, D),
            "b_Q": split_b(self.W_q),
            "b_K": split_b(self.W_k),
            "b_V": split_b(self.W_v),
            "b_O": self.W_o.bias if self.W_o.bias is not None else torch.zeros(D, **like),
        }
        return out

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None,
        is_causal: bool,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """x [B,T,D]; bias: additive float mask [B|1, H|1, T, Tk] or None -> [B,T,D]."""
        B, T, _ = x.shape
        H, dh = self.n_heads, self.d_head
        q = self.q(self.W_q(x).view(B, T, H, dh)).transpose(1, 2)
        k = self.k(self.W_k(x).view(B, T, H, dh)).transpose(1, 2)
        v = self.v(self.W_v(x).view(B, T, H, dh)).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)
        if self.pattern.active:
            # explicit path: one [B,H,T,Tk] pass to build the scores (scale folded into q, bias added in place)
            scores = (q * self.scale) @ k.transpose(-1, -2)
            if bias is not None:
                scores.add_(bias)
            elif is_causal:
                scores.add_(causal_bias(T, k.shape[2], scores.device, scores.dtype))
            if scores.requires_grad:
                probs = scores.softmax(dim=-1)
            else:  # no autograd: normalise in place (the kernel finishes each row's max before writing it)
                probs = torch.ops.aten._softmax.out(scores, -1, False, out=scores)
            pattern = self.pattern(probs)
            z = pattern @ v
        else:
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=is_causal and bias is None)
        z = self.z(z.transpose(1, 2))  # [B,T,H,dh]
        if self.head_out.active:
            W_O = self.W_o.weight.T.reshape(H, dh, -1)
            per_head = self.head_out(torch.einsum("bthd,hdm->bthm", z, W_O))
            out = per_head.sum(dim=2)
            return out.add_(self.W_o.bias) if self.W_o.bias is not None else out
        return self.W_o(z.reshape(B, T, H * dh))
