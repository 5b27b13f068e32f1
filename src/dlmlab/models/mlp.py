"""Feed-forward sublayer: GELU / ReLU MLP or SwiGLU (Llama)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dlmlab.interp.hooks import HookPoint
from dlmlab.models.config import TransformerConfig


class MLP(nn.Module):
    """x [B,T,D] -> [B,T,D]; hook ``post`` on the hidden activation [B,T,d_mlp]."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.kind = cfg.mlp
        self.fc_in = nn.Linear(cfg.d_model, cfg.d_mlp, bias=cfg.bias)
        if cfg.mlp == "swiglu":
            self.fc_gate = nn.Linear(cfg.d_model, cfg.d_mlp, bias=cfg.bias)
        self.fc_out = nn.Linear(cfg.d_mlp, cfg.d_model, bias=cfg.bias)
        self.post = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc_in(x)
        if self.kind == "swiglu":
            h = F.silu(self.fc_gate(x)) * h
        elif self.kind == "gelu_new":
            h = F.gelu(h, approximate="tanh")
        elif self.kind == "gelu":
            h = F.gelu(h)
        else:
            h = F.relu(h)
        return self.fc_out(self.post(h))
