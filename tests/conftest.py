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


@pytest.fixture(scope="session")
def study_smoke(tmp_path_factory):
    """``study_smoke(name) -> (out, res, results)``: the study's smoke preset run once per test session on one
    worker process and one caller thread (the tests' defaults), shared by the test modules that need that run
    (issue 34: tests/test_parallel.py compares other worker / thread counts against it, tests/test_state_study.py
    and tests/test_reversal_study.py check its outputs).  ``res`` is what ``run`` returned, ``results`` the
    results.json read straight after the run (later tests may rewrite files under ``out``)."""
    import json

    from dlmlab.studies import load_study

    cache: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in cache:
            out = tmp_path_factory.mktemp(f"{name}_smoke")
            before = torch.get_num_threads()
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("DLMLAB_WORKERS", "1")
                torch.set_num_threads(1)
                try:
                    res = load_study(name).run("smoke", out, progress=False)
                finally:
                    torch.set_num_threads(before)
            cache[name] = (out, res, json.loads((out / "results.json").read_text()))
        return cache[name]

    return get
