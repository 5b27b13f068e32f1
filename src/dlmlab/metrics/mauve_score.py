"""MAUVE between two sets of texts on features from a *local* model (never a download).

``mean_pooled_features`` runs any toolkit model with a ``final`` hook point (the
pretrained backbone, typically) and mean-pools its final hidden states; the
features go to ``mauve.compute_mauve(p_features=..., q_features=...)``, so
mauve-text never loads GPT-2 itself.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


@torch.no_grad()
def mean_pooled_features(model, sequences: Sequence[Sequence[int]], batch: int = 32) -> np.ndarray:
    """Token id lists -> [N, D] mean of the model's ``final`` hidden states over each sequence."""
    if not sequences:
        raise ValueError("no sequences to featurise")
    model.eval()
    feats = []
    for i in range(0, len(sequences), batch):
        chunk = [list(s) for s in sequences[i:i + batch]]
        for s in chunk:
            if not s:
                raise ValueError("cannot featurise an empty sequence")
        L = max(len(s) for s in chunk)
        device = next(model.parameters()).device
        ids = torch.tensor([s + [0] * (L - len(s)) for s in chunk], device=device)
        keep = torch.tensor([[1.0] * len(s) + [0.0] * (L - len(s)) for s in chunk], device=device)
        with model.cache(["final"]) as c:
            model(ids, attn_mask="causal")  # causal: padding on the right cannot leak into real positions
        h = c["final"].float()
        feats.append(((h * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)).cpu().numpy())
    return np.concatenate(feats, 0)


def mauve_score(p_features: np.ndarray, q_features: np.ndarray, seed: int = 25, num_buckets: int | str = "auto") -> float:
    """MAUVE (0-1, higher = closer distributions) of two feature sets [N, D]."""
    import mauve

    if len(p_features) < 2 or len(q_features) < 2:
        raise ValueError("MAUVE needs at least two feature vectors per side")
    out = mauve.compute_mauve(p_features=np.asarray(p_features, dtype=np.float32),
                              q_features=np.asarray(q_features, dtype=np.float32), seed=seed,
                              num_buckets=num_buckets, verbose=False, device_id=-1)
    return float(out.mauve)
