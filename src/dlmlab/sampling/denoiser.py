"""One calling convention for the models the decoder drives.

* a :class:`~dlmlab.prediff.PreDiffLM` (time embedding, self-conditioning, optional shift, hybrid or
  bidirectional attention; its mask id is its own);
* a plain toolkit :class:`~dlmlab.models.Transformer` trained with the masked-diffusion objective
  (``dlmlab train`` with ``objective: mdlm``; bidirectional; the mask id comes from the run).
"""

from __future__ import annotations

import torch

from dlmlab.config import ConfigError
from dlmlab.hooks import HookedModule


class Denoiser:
    """Adapter: ``den(tokens, ...)`` -> logits aligned to ``tokens`` (``out[:, i]`` predicts ``tokens[:, i]``)."""

    def __init__(self, model, mask_id: int | None = None) -> None:
        self.model = model
        self.is_prediff = hasattr(model, "backbone") and hasattr(model, "mask_id")
        if self.is_prediff:
            if mask_id is not None and mask_id != model.mask_id:
                raise ConfigError(f"mask_id {mask_id} differs from the model's own mask id {model.mask_id}")
            self.mask_id = model.mask_id
            self.hooked: HookedModule = model.backbone
            self.prompt_causal = model.attention == "hybrid"
            self.shift = bool(model.shift)
            self.uses_self_cond = bool(model.uses_self_cond)
        else:
            if mask_id is None:
                raise ConfigError("mask_id is needed for a plain Transformer (read it from the run: the last vocabulary id)")
            kind = model.cfg.attn_mask
            if kind == "causal":
                raise ConfigError("a causal Transformer cannot denoise (it needs attn_mask 'bidirectional' or 'hybrid')")
            self.mask_id = mask_id
            self.hooked = model
            self.prompt_causal = kind == "hybrid"
            self.shift = False
            self.uses_self_cond = False
        vocab = self.hooked.cfg.vocab_size
        if not 0 <= self.mask_id < vocab:
            raise ConfigError(f"mask_id {self.mask_id} outside the model vocabulary [0, {vocab})")
        self.alibi = self.hooked.cfg.positions == "alibi"

    def __call__(self, tokens: torch.Tensor, *, clean_len: int, t: torch.Tensor, attn: torch.Tensor | None = None,
                 cache=None, self_cond: torch.Tensor | None = None, first: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B,T] at positions ``cache.length ..`` -> aligned logits [B,T,V].

        clean_len: positions below it are clean context (prompt, finished blocks); t [B]: mask rate of the
        noisy part; attn: boolean "may attend" [1,1,T,Tk] or None for the model's own mask; self_cond
        [B,T,V]; first [B,V]: logits predicting ``tokens[:, 0]`` (shifted models with a cache).
        """
        if self.is_prediff:
            return self.model(tokens, t, prompt_len=clean_len, attn_mask=attn, self_cond=self_cond,
                              kv_cache=cache, first_logits=first)
        return self.model(tokens, attn_mask=attn, prompt_len=clean_len, kv_cache=cache)

    def encode_context(self, tokens: torch.Tensor, cache) -> torch.Tensor:
        """Run clean context tokens [B,P] alone (keys/values into ``cache``) -> raw logits of the last position [B,V]."""
        kind = "hybrid" if self.prompt_causal else "bidirectional"
        return self.hooked(tokens, attn_mask=kind, prompt_len=tokens.shape[1], kv_cache=cache)[:, -1]

    def soft_prediction(self, logits: torch.Tensor) -> torch.Tensor:
        return self.model.soft_prediction(logits)
