"""How far approximate KV reuse's logits are from recomputing every position (Fast-dLLM's trade-off, measured)."""

from __future__ import annotations

import dataclasses

import torch

from dlmlab.sampling.config import DecodeConfig
from dlmlab.sampling.decode import decode
from dlmlab.sampling.denoiser import as_denoiser
from dlmlab.sampling.kv_reuse import block_causal_mask
from dlmlab.sampling.trajectory import TraceConfig


@torch.no_grad()
def kv_reuse_deviation(model, canvas: torch.Tensor, prompt_len: int, cfg: DecodeConfig,
                       generator: torch.Generator | None = None, mask_id: int | None = None,
                       shift_logits: bool = False) -> dict:
    """Decode with ``cfg`` (self-conditioning off) and, at every step, recompute the block's logits from scratch
    on the same tokens -> {"max_abs": largest logit difference, "mean_abs": mean over steps of the mean absolute
    difference, "top1_agree": share of candidate positions whose argmax agrees, "steps": steps compared}."""
    den = as_denoiser(model, mask_id, shift_logits)
    cfg = dataclasses.replace(cfg, self_cond=False)
    res = decode(den, canvas, prompt_len, cfg, generator, trace=TraceConfig(logits=True), record=True)
    M, N = den.mask_id, canvas.shape[1]
    before = canvas
    max_abs, means, agree, total = 0.0, [], 0, 0
    for rec in res.trajectory:
        s, e = rec.block_span
        ve = e if cfg.attention == "block_causal" else N
        t = (before[:, s:ve] == M).float().mean(1)
        attn = None
        if cfg.attention == "block_causal":
            attn = block_causal_mask(0, N, N, prompt_len, cfg.block_len, den.prompt_causal, canvas.device)
        ref = den(before, clean_len=s, t=t, attn=attn)[:, s:e]
        cand = before[:, s:e] == M
        diff = (rec.logits - ref).abs().amax(-1)[cand]
        max_abs = max(max_abs, float(diff.max()))
        means.append(float(diff.mean()))
        agree += int((rec.logits.argmax(-1) == ref.argmax(-1))[cand].sum())
        total += int(cand.sum())
        before = rec.tokens
    return {"max_abs": max_abs, "mean_abs": sum(means) / max(len(means), 1), "top1_agree": agree / max(total, 1),
            "steps": len(res.trajectory)}
