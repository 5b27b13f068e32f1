"""One exact cache default in Python and the CLI (``none``), and every trajectory record labelled with its cache
and whether it is exact."""

from __future__ import annotations

import argparse

import torch

from dlmlab.cli import sample_cmd
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.sampling import DecodeConfig, generate


V = 30
MASK = V - 1


def _bidirectional(seed=0):
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64,
                            positions="rope", attn_mask="bidirectional")
    return Transformer(cfg).double().eval()


def _prompt(B=2, P=4):
    return torch.randint(0, MASK, (B, P), generator=torch.Generator().manual_seed(1))


def test_python_and_cli_default_to_the_exact_cache():
    assert DecodeConfig().cache == "none"
    p = argparse.ArgumentParser()
    sample_cmd.add_arguments(p)
    assert p.parse_args(["RUN"]).cache == DecodeConfig().cache
    # the default on a fully bidirectional model (where prompt / prefix / dual caches are approximate) is exact
    res = generate(_bidirectional(), _prompt(), 6, DecodeConfig(steps=3), torch.Generator().manual_seed(0),
                   mask_id=MASK)
    assert (res.cache, res.exactness) == ("none", "exact")


def test_every_trajectory_record_names_its_cache_and_whether_it_is_exact():
    m = _bidirectional()
    for cfg, cache, exact in [(DecodeConfig(steps=3), "none", True),
                              (DecodeConfig(steps=4, cache="prefix", block_len=3), "prefix", False),
                              (DecodeConfig(steps=4, cache="dual", block_len=3, attention="block_causal"), "dual", True)]:
        seen = []
        res = generate(m, _prompt(), 6, cfg, torch.Generator().manual_seed(0), mask_id=MASK, record=True,
                       callback=seen.append)
        assert len(res.trajectory) == res.steps > 0 and seen == res.trajectory
        assert {(r.cache, r.exact) for r in res.trajectory} == {(cache, exact)}
        assert res.exactness == ("exact" if exact else "approximate")
