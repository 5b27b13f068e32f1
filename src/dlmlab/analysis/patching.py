"""Position-wise activation patching, clean -> corrupted, scored by the logit gap recovered.

Generic over hook names, so it works on any toolkit model (or a wrapped HF model).
For each hook ``h`` and position ``p``: run the *corrupted* input with the clean
activation at (h, p) pasted in, and measure at ``target_pos`` the gap
``logit[clean_label] - logit[corrupt_label]``.  The fraction recovered is
``(patched - corrupt) / (clean - corrupt)`` of the batch-mean gaps: 0 = no effect,
1 = the clean behaviour fully restored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch


@dataclass
class PatchResult:
    hooks: list[str]
    positions: list[int]
    recovered: np.ndarray  # [n_hooks, n_positions]
    clean_gap: float
    corrupt_gap: float

    def to_dict(self) -> dict:
        return {"hooks": self.hooks, "positions": self.positions, "recovered": self.recovered.tolist(),
                "clean_gap": self.clean_gap, "corrupt_gap": self.corrupt_gap}


def logit_gap(logits: torch.Tensor, pos: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """logits [B, T, C] -> [B] logits[:, pos, a] - logits[:, pos, b]."""
    rows = torch.arange(logits.shape[0])
    return logits[rows, pos, a] - logits[rows, pos, b]


@torch.no_grad()
def patch_positions(model, clean: torch.Tensor, corrupted: torch.Tensor, clean_label: torch.Tensor,
                    corrupt_label: torch.Tensor, hooks: Sequence[str], positions: Sequence[int] | None = None,
                    target_pos: int = -1) -> PatchResult:
    """clean, corrupted [B, T] tokens; clean_label, corrupt_label [B] classes at ``target_pos``.

    Rows where the two labels coincide carry no gap and should be dropped by the caller
    (a ValueError is raised if the clean and corrupted gaps are equal on average).
    """
    if clean.shape != corrupted.shape or clean.dim() != 2:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} must be equal [B, T]")
    B, T = clean.shape
    positions = list(range(T)) if positions is None else [int(p) for p in positions]
    for p in positions:
        if not -T <= p < T:
            raise ValueError(f"position {p} out of range for length {T}")
    hooks = list(hooks)
    was_training = model.training
    model.eval()
    try:
        with model.cache(hooks) as cache:
            clean_logits = model(clean)
        missing = [h for h in hooks if h not in cache]
        if missing:
            raise KeyError(f"hook points {missing} were not reached in the forward pass")
        a, b = clean_label.long(), corrupt_label.long()
        g_clean = float(logit_gap(clean_logits, target_pos, a, b).mean())
        g_corr = float(logit_gap(model(corrupted), target_pos, a, b).mean())
        if abs(g_clean - g_corr) < 1e-9:
            raise ValueError("clean and corrupted runs give the same logit gap: nothing to recover")
        rec = np.zeros((len(hooks), len(positions)))
        for i, h in enumerate(hooks):
            for j, p in enumerate(positions):
                src = cache[h][:, p]

                def paste(x, hp, src=src, p=p):
                    x = x.clone()
                    x[:, p] = src.to(x.dtype)
                    return x

                with model.hooks({h: paste}):
                    g = float(logit_gap(model(corrupted), target_pos, a, b).mean())
                rec[i, j] = (g - g_corr) / (g_clean - g_corr)
    finally:
        model.train(was_training)
    return PatchResult(hooks, positions, rec, g_clean, g_corr)
