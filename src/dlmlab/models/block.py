"""Pre-norm transformer block: resid_pre -> attn -> resid_mid -> mlp -> resid_post.

Hook points [B,T,D]: ``resid_pre``; ``attn_out`` and ``mixer_out`` (the same tensor: the attention
sublayer's output, ``mixer_out`` being the name every model family shares, see
:mod:`dlmlab.models.protocol`; a hook on ``attn_out`` runs first); with an MLP ``resid_mid =
resid_pre + mixer_out`` and ``mlp_out`` (the MLP's output, *not* part of ``mixer_out``);
``resid_post`` = ``resid_mid + mlp_out`` (or ``resid_pre + mixer_out`` without an MLP).
"""

from __future__ import annotations

import torch
from torch import nn

from dlmlab.interp.hooks import HookPoint
from dlmlab.models.attention import Attention
from dlmlab.models.config import TransformerConfig
from dlmlab.models.kv_cache import KVCache
from dlmlab.models.mlp import MLP
from dlmlab.models.norm import make_norm


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig, layer: int) -> None:
        super().__init__()
        self.ln1 = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.bias, hooked=True)
        self.attn = Attention(cfg, layer)
        self.resid_pre, self.attn_out, self.resid_post = HookPoint(), HookPoint(), HookPoint()
        self.mixer_out = HookPoint()
        self.mlp = None
        if not cfg.attn_only:
            self.ln2 = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.bias, hooked=True)
            self.mlp = MLP(cfg)
            self.resid_mid, self.mlp_out = HookPoint(), HookPoint()

    def forward(self, x, bias, is_causal, rope, cache: KVCache | None = None) -> torch.Tensor:
        """x [B,T,D] -> [B,T,D]."""
        x = self.resid_pre(x)
        x = x + self.mixer_out(self.attn_out(self.attn(self.ln1(x), bias, is_causal, rope, cache)))
        if self.mlp is not None:
            x = self.resid_mid(x)
            x = x + self.mlp_out(self.mlp(self.ln2(x)))
        return self.resid_post(x)
