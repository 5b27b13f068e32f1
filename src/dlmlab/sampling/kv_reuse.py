"""The sampler's KV reuse (Fast-dLLM-style prompt / prefix / dual caches): key/value reuse across
denoising steps, and which reuse is exact.  ``DecodeConfig.kv_reuse`` picks the kind.

A decoding step of block ``[s, e)`` needs logits only there.  What the other positions contribute
through attention can be reused:

=========  ===============================================  ================================================
kv_reuse   reused keys/values                               exact when
=========  ===============================================  ================================================
none       nothing (every position recomputed each step)    always (the reference)
prompt     the prompt's                                     the prompt never attends to the generated part:
                                                            PreDiff hybrid attention or ``block_causal``
prefix     the prompt's and the finished blocks'            the same condition (finished blocks join the
                                                            clean context: causal for hybrid models,
                                                            earlier blocks only under ``block_causal``)
dual       prefix and the masked suffix after the block     never (Fast-dLLM DualCache); exact under
                                                            ``block_causal``, where the suffix is unseen
=========  ===============================================  ================================================

Approximate reuse (a fully bidirectional model) are refreshed by a full forward at each block
start and every ``refresh_every`` steps (Fast-dLLM); exact ones are extended when a block finishes.
"""

from __future__ import annotations

import torch

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each [B, H, T, d_head]


def kv_reuse_exactness(kv_reuse: str, attention: str, prompt_causal: bool) -> str:
    """'exact' or 'approximate' for a KV-reuse kind under an attention mode (see the module table)."""
    if kv_reuse == "none":
        return "exact"
    if attention == "block_causal":
        return "exact"
    if kv_reuse in ("prompt", "prefix") and prompt_causal:
        return "exact"
    return "approximate"


class SpanKV:
    """Duck-typed :class:`~dlmlab.models.KVCache`: a forward attends to ``prefix`` keys/values, then its
    own, then ``suffix`` ones; its own are kept in :attr:`new` (per layer) and never stored in place."""

    frozen = True

    def __init__(self, prefix: KV | None = None, suffix: KV | None = None) -> None:
        self.prefix = prefix or []
        self.suffix = suffix or []
        self.new: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def length(self) -> int:
        return self.prefix[0][0].shape[2] if self.prefix else 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.new[layer] = (k, v)
        ks, vs = [k], [v]
        if self.prefix:
            ks.insert(0, self.prefix[layer][0])
            vs.insert(0, self.prefix[layer][1])
        if self.suffix:
            ks.append(self.suffix[layer][0])
            vs.append(self.suffix[layer][1])
        if len(ks) == 1:
            return k, v
        return torch.cat(ks, dim=2), torch.cat(vs, dim=2)

    def recorded(self) -> KV:
        return [self.new[i] for i in sorted(self.new)]


def span(kv: KV, start: int, end: int | None = None) -> KV:
    """Positions ``start:end`` of every layer's keys/values."""
    return [(k[:, :, start:end], v[:, :, start:end]) for k, v in kv]


def rows(kv: KV, idx: torch.Tensor | None) -> KV:
    """Rows ``idx`` of every layer (all rows when ``idx`` is None)."""
    return kv if idx is None else [(k[idx], v[idx]) for k, v in kv]


def concat(a: KV, b: KV) -> KV:
    """Keys/values of ``a`` followed by those of ``b`` along positions."""
    if not a:
        return b
    return [(torch.cat([ka, kb], 2), torch.cat([va, vb], 2)) for (ka, va), (kb, vb) in zip(a, b)]


def block_causal_mask(q_start: int, q_end: int, k_len: int, prompt_len: int, block_len: int,
                      prompt_causal: bool, device=None) -> torch.Tensor:
    """Boolean "may attend" [1,1,Tq,Tk] for queries at ``q_start:q_end`` and keys at ``0:k_len``.

    The prompt is block 0 (causal inside when ``prompt_causal``); generated positions form blocks of
    ``block_len`` (one block when 0); a query sees its own block and earlier blocks.
    """
    q = torch.arange(q_start, q_end, device=device)
    k = torch.arange(k_len, device=device)

    def block(pos: torch.Tensor) -> torch.Tensor:
        gen = (pos - prompt_len).clamp(min=0)
        idx = gen // block_len + 1 if block_len > 0 else torch.ones_like(gen)
        return torch.where(pos < prompt_len, torch.zeros_like(pos), idx)

    allowed = block(k)[None, :] <= block(q)[:, None]
    if prompt_causal:
        in_prompt = (q[:, None] < prompt_len) & (k[None, :] < prompt_len)
        allowed = allowed & (~in_prompt | (k[None, :] <= q[:, None]))
    return allowed[None, None]
