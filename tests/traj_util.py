"""The small bidirectional Transformer, prompt and recorded decode that the trajectory tests share."""

from __future__ import annotations

import torch

from dlmlab.models import Transformer, TransformerConfig
from dlmlab.sampling import generate

V, MASK, P, G = 30, 29, 5, 12  # vocabulary, mask id, prompt length, generated length
POINT = "blocks.0.resid_post"


def _model():
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64,
                            attn_mask="bidirectional", positions="rope")
    return Transformer(cfg).eval()


def _prompt(B=3):
    return torch.randint(0, MASK, (B, P), generator=torch.Generator().manual_seed(1))


def _run(m, cfg, ivs=None, seed=2):
    return generate(m, _prompt(), G, cfg, torch.Generator().manual_seed(seed), mask_id=MASK, record=True,
                    interventions=ivs)
