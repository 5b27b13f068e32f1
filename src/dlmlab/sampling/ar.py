"""Autoregressive decoding with a KV cache (the AR control of the PreDiff study)."""

from __future__ import annotations

import torch

from dlmlab.models import KVCache
from dlmlab.sampling.gumbel import sample_from_logits


@torch.no_grad()
def sample_ar(model, prompt: torch.Tensor, gen_len: int, temperature: float = 1.0, top_p: float = 1.0,
              generator: torch.Generator | None = None, use_cache: bool = True) -> torch.Tensor:
    """prompt [B,P] (P >= 1) -> prompt + ``gen_len`` sampled tokens [B, P+gen_len].

    With ``use_cache`` the prompt is encoded once and each new token costs one
    single-position forward; without it every step re-runs the whole prefix.
    ``model`` is a causal toolkit Transformer (``model(tokens, kv_cache=...)``).
    """
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be [batch, >=1 tokens], got shape {tuple(prompt.shape)}")
    if gen_len < 0:
        raise ValueError(f"gen_len must be >= 0, got {gen_len}")
    model.eval()
    out = prompt
    cache = KVCache() if use_cache else None
    logits = model(prompt, attn_mask="causal", kv_cache=cache)[:, -1]
    for i in range(gen_len):
        tok, _ = sample_from_logits(logits, temperature, top_p, generator)
        out = torch.cat([out, tok[:, None].to(out.dtype)], dim=1)
        if i == gen_len - 1:
            break
        if use_cache:
            logits = model(tok[:, None].to(out.dtype), attn_mask="causal", kv_cache=cache)[:, -1]
        else:
            logits = model(out, attn_mask="causal")[:, -1]
    return out
