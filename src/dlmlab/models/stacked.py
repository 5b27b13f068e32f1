"""Shared shell of the non-transformer sequence models (Mamba, Mamba-2, LSTM/GRU).

embed -> blocks -> final norm -> unembed, with hook points ``embed``, ``final`` and
``logits`` (blocks add their own).  Subclasses build ``tok_emb``, ``blocks``,
``ln_final`` and ``unembed`` and then call :meth:`finish_init`.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from dlmlab.hooks import HookedModule, HookPoint
from dlmlab.models.checks import check_tokens
from dlmlab.models.norm import RMSNorm


class StackedLM(HookedModule):
    def finish_init(self) -> None:
        self.embed, self.final, self.logits = HookPoint(), HookPoint(), HookPoint()
        self.setup_hooks()

    def check_tokens(self, tokens: torch.Tensor) -> None:
        """Raise ValueError naming the problem if ``tokens`` cannot be fed to this model."""
        check_tokens(tokens, self.cfg.vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B,T] (long) -> logits [B,T,n_out]."""
        self.check_tokens(tokens)
        x = self.embed(self.tok_emb(tokens))
        for block in self.blocks:
            x = block(x)
        x = self.final(self.ln_final(x))
        return self.logits(self.unembed(x))


@torch.no_grad()
def record_mixer_states(model: StackedLM, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Run ``model`` with every ``block.mixer.record_states`` on; return each mixer's ``last_states``."""
    mixers = [b.mixer for b in model.blocks]
    for m in mixers:
        m.record_states = True
    try:
        model(tokens)
        return [m.last_states for m in mixers]
    finally:
        for m in mixers:
            m.record_states = False
            m.last_states = None


class PreNormBlock(nn.Module):
    """x -> x + mixer(RMSNorm(x)), hook points ``resid_pre``, ``mixer_out``, ``resid_post`` [B,T,D]."""

    def __init__(self, d_model: int, eps: float, mixer: nn.Module) -> None:
        super().__init__()
        self.norm = RMSNorm(d_model, eps)
        self.mixer = mixer
        self.resid_pre, self.mixer_out, self.resid_post = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.resid_pre(x)
        return self.resid_post(x + self.mixer_out(self.mixer(self.norm(x))))


class SSMStack(StackedLM):
    """Embedding -> n_layers x PreNormBlock(make_mixer(cfg)) -> RMSNorm -> linear head (Mamba, Mamba-2)."""

    def __init__(self, cfg, make_mixer: Callable[[object], nn.Module]) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList([PreNormBlock(cfg.d_model, cfg.norm_eps, make_mixer(cfg)) for _ in range(cfg.n_layers)])
        self.ln_final = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.unembed = nn.Linear(cfg.d_model, cfg.out_size, bias=False)
        if cfg.tie_embeddings and cfg.out_size == cfg.vocab_size:
            self.unembed.weight = self.tok_emb.weight
        with torch.no_grad():
            nn.init.normal_(self.tok_emb.weight, std=cfg.init_std)
            if self.unembed.weight is not self.tok_emb.weight:
                nn.init.normal_(self.unembed.weight, std=cfg.init_std)
            for b in self.blocks:  # GPT-2 style residual scaling of the output projection
                b.mixer.out_proj.weight.div_(math.sqrt(cfg.n_layers))
        self.finish_init()
