"""Shared shell of the non-transformer sequence models (Mamba, Mamba-2, LSTM/GRU).

embed -> blocks -> final norm -> unembed, with hook points ``embed``, ``final`` and
``logits`` (blocks add their own).  Subclasses build ``tok_emb``, ``blocks``,
``ln_final`` and ``unembed`` and then call :meth:`finish_init`.

These models are causal (left to right) by construction.  ``forward`` takes the keywords
common to every family (:data:`dlmlab.models.protocol.COMMON_KEYWORDS`): ``embed_add`` is
added to the input embedding; ``attn_mask`` may only be ``None`` or ``"causal"`` (what the
model computes) and ``prompt_len`` is then ignored, as in the Transformer; ``kv_cache`` is
refused (there are no keys and values to cache).  Anything else raises a one-line
:class:`~dlmlab.models.checks.ModelInputError`.  :func:`ssm_states` returns the SSM states
of Mamba / Mamba-2.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from dlmlab.interp.hooks import HookedModule, HookPoint
from dlmlab.models.checks import ModelInputError, check_causal_keywords, check_tokens
from dlmlab.models.norm import RMSNorm
from dlmlab.models.protocol import ProtocolMethods, family_name
from dlmlab.models.weight_views import EmbedViews


class StackedLM(ProtocolMethods, EmbedViews, HookedModule):
    """``W_E`` / ``W_U`` / ``b_U`` views: :mod:`dlmlab.models.weight_views`."""

    residual_stream = True  # resid_post = resid_pre + mixer_out (RecurrentModel: cfg.residual)
    supports_kv_cache = False  # forward refuses kv_cache: decoders re-run the prefix

    def finish_init(self) -> None:
        self.embed, self.final, self.logits = HookPoint(), HookPoint(), HookPoint()
        self.setup_hooks()

    @property
    def family(self) -> str:
        return self.cfg.family

    def check_tokens(self, tokens: torch.Tensor) -> None:
        """Raise :class:`ModelInputError` (a ValueError) naming the problem if ``tokens`` cannot be fed
        to this model."""
        check_tokens(tokens, self.cfg.vocab_size)

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        attn_mask: str | None = None,
        prompt_len: torch.Tensor | int | None = None,
        embed_add: torch.Tensor | None = None,
        kv_cache=None,
    ) -> torch.Tensor:
        """tokens [B,T] (long) -> logits [B,T,n_out].

        attn_mask: ``None`` or ``"causal"`` (these models are causal; anything else is refused).
        prompt_len: ignored (it only matters for a "hybrid" mask, which needs attention).
        embed_add: [B,T,D] added to the input embedding (after the ``embed`` hook point).
        kv_cache: refused (no keys / values to cache).
        """
        self.check_tokens(tokens)
        check_causal_keywords(family_name(self), attn_mask, kv_cache)
        x = self.embed(self.tok_emb(tokens))
        if embed_add is not None:
            x = x + embed_add
        for block in self.blocks:
            x = block(x)
        x = self.final(self.ln_final(x))
        return self.logits(self.unembed(x))


@torch.no_grad()
def ssm_states(model: StackedLM, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Per-layer SSM states of a Mamba ([B,T,Di,N]) or Mamba-2 ([B,T,H,P,N]) ``model`` on ``tokens``.

    Runs the sequential reference scan with every ``block.mixer.record_states`` on and returns each
    mixer's ``last_states``.  States live inside the scan, so they are returned here rather than as a
    hook point (a hook there could not change the output).  Memory: B*T*state floats per layer.
    """
    if not all(hasattr(getattr(b, "mixer", None), "record_states") for b in getattr(model, "blocks", [])):
        raise ModelInputError(f"ssm_states needs a Mamba or Mamba-2 model; got a {type(model).__name__}")
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
