"""Attention masks: causal, bidirectional and hybrid (prompt causal, target bidirectional).

All builders return a boolean "may attend" tensor broadcastable to [B, 1, Tq, Tk]
for queries at absolute positions ``q_pos`` [Tq] and keys at ``k_pos`` [Tk].
"""

from __future__ import annotations

import torch

from dlmlab.models.checks import ModelInputError


def build_mask(
    kind: str,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    prompt_len: torch.Tensor | int | None = None,
    batch: int = 1,
) -> torch.Tensor | None:
    """Boolean mask [B or 1, 1, Tq, Tk]; ``None`` means attend everywhere.

    hybrid: a query in the prompt (pos < P) sees prompt keys at or before it; a
    query in the target sees every key (prompt and target).  No target -> prompt flow.
    """
    if kind == "bidirectional":
        return None
    causal = k_pos[None, :] <= q_pos[:, None]  # [Tq, Tk]
    if kind == "causal":
        return causal[None, None]
    if kind == "hybrid":
        if prompt_len is None:
            raise ModelInputError("hybrid attention needs prompt_len (int or [B] tensor)")
        P = torch.as_tensor(prompt_len, device=q_pos.device).reshape(-1, 1, 1)  # [B|1,1,1]
        q_in_prompt = q_pos[None, :, None] < P  # [B,Tq,1]
        k_in_prompt = k_pos[None, None, :] < P  # [B,1,Tk]
        allowed = torch.where(q_in_prompt, causal[None] & k_in_prompt, torch.ones_like(causal[None]))
        return allowed[:, None]
    raise ModelInputError(f"unknown attention mask {kind!r} (use causal, bidirectional or hybrid)")
