"""Stacked LSTM / GRU sequence taggers with one hook point per layer.

Each layer is its own single-layer ``nn.LSTM`` / ``nn.GRU`` inside a
:class:`RecurrentBlock`, so the stack computes exactly what
``nn.LSTM(d_model, hidden_size, num_layers=n_layers, batch_first=True)`` computes
(no dropout), but every layer's output is a named hook point.

Hook points follow :mod:`dlmlab.models.protocol` (family = ``cell``; H = ``hidden_size``,
D = ``d_model``): ``embed`` [B,T,D]; ``blocks.{i}.resid_pre`` [B,T,D for i=0 else H] (the layer's
input); ``blocks.{i}.rnn_out`` and ``blocks.{i}.mixer_out`` [B,T,H] (the same tensor: the layer's
hidden states h_t; a hook on ``rnn_out`` runs first); ``blocks.{i}.resid_post`` [B,T,H] (the
layer's output); ``final`` [B,T,H] (after the optional final norm); ``logits`` [B,T,n_out].

The "resid" names are the protocol's, but only ``residual=True`` makes them a residual stream
(``resid_post = resid_pre + mixer_out``).  The default plain stack has no skip connection
(``model.residual_stream`` is False): ``resid_pre`` / ``resid_post`` are the stream of hidden
states passed from layer to layer, ``resid_post == mixer_out`` (replacing either changes the next
layer's input alike), and the width changes from D to H after ``blocks.0.resid_pre``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from dlmlab.config import Config, Derived, is_auto, require
from dlmlab.interp.hooks import HookPoint
from dlmlab.models.stacked import StackedLM
from dlmlab.models.norm import make_norm

Cell = Literal["lstm", "gru"]


@dataclass
class RecurrentConfig(Config):
    """Shape of a :class:`RecurrentModel`.

    ``hidden_size = 0`` -> ``d_model`` (re-derived by ``dataclasses.replace``).  ``residual`` adds
    each layer's input to its output (needs ``d_model == hidden_size``); the default is a plain stack.
    Checked when built.
    """

    cell: Cell = "lstm"
    vocab_size: int = 0
    n_out: int = 0  # 0 -> vocab_size
    d_model: int = 128  # embedding width (input of layer 0)
    hidden_size: int = 0  # recurrent width of every layer; 0 -> d_model
    n_layers: int = 4
    residual: bool = False
    final_norm: Literal["layernorm", "rmsnorm", "none"] = "none"
    norm_eps: float = 1e-5
    tie_embeddings: bool = False

    def derive(self) -> None:
        if is_auto(self.hidden_size):
            self.hidden_size = Derived(self.d_model)

    def validate(self) -> None:
        require(self.cell in ("lstm", "gru"), f"model.cell must be 'lstm' or 'gru', got {self.cell!r}")
        require(self.vocab_size > 0, f"model.vocab_size must be > 0, got {self.vocab_size}")
        require(self.n_out >= 0, f"model.n_out must be >= 0, got {self.n_out}")
        require(self.d_model > 0, f"model.d_model must be > 0, got {self.d_model}")
        require(self.hidden_size > 0, f"model.hidden_size must be > 0, got {self.hidden_size}")
        require(self.n_layers >= 1, f"model.n_layers must be >= 1, got {self.n_layers}")
        require(self.norm_eps > 0, f"model.norm_eps must be > 0, got {self.norm_eps}")
        require(
            not self.residual or self.d_model == self.hidden_size,
            f"model.residual needs d_model == hidden_size, got {self.d_model} and {self.hidden_size}",
        )

    @property
    def family(self) -> str:
        """The model family, ``cell`` ("lstm" or "gru"; see :mod:`dlmlab.models.protocol`)."""
        return self.cell

    @property
    def out_size(self) -> int:
        return self.n_out or self.vocab_size


class RecurrentBlock(nn.Module):
    """One recurrent layer: x [B,T,d_in] -> [B,T,H]."""

    def __init__(self, cfg: RecurrentConfig, index: int) -> None:
        super().__init__()
        d_in = cfg.d_model if index == 0 else cfg.hidden_size
        rnn_cls = nn.LSTM if cfg.cell == "lstm" else nn.GRU
        self.rnn = rnn_cls(d_in, cfg.hidden_size, num_layers=1, batch_first=True)
        self.residual = cfg.residual
        self.resid_pre, self.rnn_out, self.resid_post = HookPoint(), HookPoint(), HookPoint()
        self.mixer_out = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.resid_pre(x)
        h, _ = self.rnn(x)
        h = self.mixer_out(self.rnn_out(h))
        return self.resid_post(x + h if self.residual else h)


class RecurrentModel(StackedLM):
    """Embedding -> n_layers x (LSTM|GRU) -> optional norm -> linear head."""

    def __init__(self, cfg: RecurrentConfig) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList([RecurrentBlock(cfg, i) for i in range(cfg.n_layers)])
        self.ln_final = make_norm(cfg.final_norm, cfg.hidden_size, cfg.norm_eps)
        self.unembed = nn.Linear(cfg.hidden_size, cfg.out_size)
        if cfg.tie_embeddings:
            if cfg.out_size != cfg.vocab_size or cfg.d_model != cfg.hidden_size:
                raise ValueError("tie_embeddings needs n_out == vocab_size and d_model == hidden_size")
            self.unembed.weight = self.tok_emb.weight
        self.finish_init()

    @property
    def residual_stream(self) -> bool:
        """True when ``resid_post = resid_pre + mixer_out`` (``cfg.residual``); False for a plain stack."""
        return self.cfg.residual
