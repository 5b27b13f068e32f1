"""Shared fixtures for the foundation tests: tiny models, deterministic seeds, repo paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from dlmlab.models import Transformer, TransformerConfig

REPO = Path(__file__).resolve().parents[1]

# Tiny test models run far faster on one thread, and the 2-core CI/dev machines are shared:
# intra-op threads fighting over cores made a 60-step toy training 20x slower.  Override with
# DLMLAB_TEST_THREADS=N.
torch.set_num_threads(int(os.environ.get("DLMLAB_TEST_THREADS", "1")))
# Studies run their models on one worker process by default in tests (and in the `dlmlab` subprocesses
# they start): spawning workers costs seconds each.  tests/test_parallel.py checks several workers.
os.environ.setdefault("DLMLAB_WORKERS", "1")


def tiny_transformer(seed: int = 0, **kw) -> Transformer:
    """A small random Transformer (float32, eval mode); keyword args override the config."""
    base = dict(vocab_size=23, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=32)
    base.update(kw)
    torch.manual_seed(seed)
    model = Transformer(TransformerConfig(**base)).eval()
    with torch.no_grad():  # non-trivial norms / biases so mapping mistakes show
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, 23, (3, 12), generator=torch.Generator().manual_seed(7))


@pytest.fixture
def subprocess_env() -> dict:
    """Environment for `dlmlab` subprocesses: quiet, single-threaded, offline data found."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               DLMLAB_DATA=str(REPO.parent / "shared" / "data"), PYTHONUNBUFFERED="1")
    return env
