"""Input checks shared by every sequence model."""

from __future__ import annotations

import torch


def check_tokens(tokens: torch.Tensor, vocab_size: int) -> None:
    """Raise ValueError naming the problem unless ``tokens`` is [B,T] ints in [0, vocab_size)."""
    if not isinstance(tokens, torch.Tensor):
        raise ValueError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"tokens must be an integer tensor, got {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be [batch, seq], got shape {tuple(tokens.shape)}")
    if tokens.numel():
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} out of range [0, {vocab_size}) for this model")
