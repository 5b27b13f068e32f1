"""Autoregressive decoding for every model family (KV-cached where the model has one; the AR control of PreDiff)."""

from __future__ import annotations

import inspect

import torch

from dlmlab.models import KVCache
from dlmlab.sampling.gumbel import sample_from_logits


def _keywords(model) -> tuple[bool, bool]:
    """(forward names ``attn_mask`` or takes ``**kwargs``, forward names ``kv_cache`` explicitly)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (AttributeError, TypeError, ValueError):
        return False, False
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return "attn_mask" in params or var_kw, "kv_cache" in params


def supports_kv_cache(model) -> bool:
    """True when ``model`` is an attention model whose forward takes a :class:`~dlmlab.models.KVCache`
    (a toolkit Transformer); SSM and recurrent models recompute instead."""
    flag = getattr(model, "supports_kv_cache", None)
    if isinstance(flag, bool):
        return flag
    blocks = getattr(model, "blocks", None)
    return (_keywords(model)[1] and bool(blocks) and all(getattr(b, "attn", None) is not None for b in blocks))


@torch.no_grad()
def sample_ar(model, prompt: torch.Tensor, gen_len: int, temperature: float = 1.0, top_p: float = 1.0,
              generator: torch.Generator | None = None, use_cache: bool = True) -> torch.Tensor:
    """prompt [B,P] (P >= 1) -> prompt + ``gen_len`` sampled tokens [B, P+gen_len].

    ``model`` is any causal model ``tokens [B,T] -> logits [B,T,V]`` (Transformer, Mamba, Mamba-2,
    LSTM, GRU, ...).  With ``use_cache`` and a model that takes a KV cache (:func:`supports_kv_cache`)
    the prompt is encoded once and each new token costs one single-position forward; otherwise every
    step re-runs the whole prefix.  A model taking ``attn_mask`` is run with ``attn_mask="causal"``.
    """
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be [batch, >=1 tokens], got shape {tuple(prompt.shape)}")
    if gen_len < 0:
        raise ValueError(f"gen_len must be >= 0, got {gen_len}")
    model.eval()
    takes_mask, _ = _keywords(model)
    kw = {"attn_mask": "causal"} if takes_mask else {}
    cache = KVCache() if use_cache and supports_kv_cache(model) else None
    out = prompt
    logits = (model(prompt, kv_cache=cache, **kw) if cache is not None else model(prompt, **kw))[:, -1]
    for i in range(gen_len):
        tok, _ = sample_from_logits(logits, temperature, top_p, generator)
        out = torch.cat([out, tok[:, None].to(out.dtype)], dim=1)
        if i == gen_len - 1:
            break
        if cache is not None:
            logits = model(tok[:, None].to(out.dtype), kv_cache=cache, **kw)[:, -1]
        else:
            logits = model(out, **kw)[:, -1]
    return out
