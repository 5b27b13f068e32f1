"""One exact KV-reuse default in Python and the CLI (``none``), every trajectory record labelled with its KV reuse
and whether it is exact, and the old names of DecodeConfig.kv_reuse / .unmask_rule refused with the new one."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch

from dlmlab.cli import sample_cmd
from dlmlab.cli.main import main
from dlmlab.config import ConfigError
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
    assert DecodeConfig().kv_reuse == "none"
    p = argparse.ArgumentParser()
    sample_cmd.add_arguments(p)
    assert p.parse_args(["RUN"]).kv_reuse == DecodeConfig().kv_reuse
    # the default on a fully bidirectional model (where prompt / prefix / dual caches are approximate) is exact
    res = generate(_bidirectional(), _prompt(), 6, DecodeConfig(steps=3), torch.Generator().manual_seed(0),
                   mask_id=MASK)
    assert (res.kv_reuse, res.exactness) == ("none", "exact")


def test_every_trajectory_record_names_its_cache_and_whether_it_is_exact():
    m = _bidirectional()
    for cfg, cache, exact in [(DecodeConfig(steps=3), "none", True),
                              (DecodeConfig(steps=4, kv_reuse="prefix", block_len=3), "prefix", False),
                              (DecodeConfig(steps=4, kv_reuse="dual", block_len=3, attention="block_causal"), "dual",
                               True)]:
        seen = []
        res = generate(m, _prompt(), 6, cfg, torch.Generator().manual_seed(0), mask_id=MASK, record=True,
                       callback=seen.append)
        assert len(res.trajectory) == res.steps > 0 and seen == res.trajectory
        assert {(r.kv_reuse, r.exact) for r in res.trajectory} == {(cache, exact)}
        assert res.exactness == ("exact" if exact else "approximate")


@pytest.mark.parametrize("old,new,value", [("schedule", "unmask_rule", "linear"), ("cache", "kv_reuse", "prefix")])
def test_renamed_fields_and_flags_name_the_new_one(old, new, value, capsys):
    """DecodeConfig.schedule / .cache are now unmask_rule / kv_reuse: the old keyword, and the old CLI flag, are
    refused with one line naming the new one; the new name decodes exactly as the old one did."""
    with pytest.raises(ConfigError, match=f"^DecodeConfig.{old} was renamed {new}: use {new}='{value}'$"):
        DecodeConfig(**{old: value})
    assert getattr(DecodeConfig(**{new: value}), new) == value
    assert dataclasses.replace(DecodeConfig(**{new: value}), steps=3).steps == 3  # replace() passes new names only
    flag, new_flag = f"--{old}", f"--{new.replace('_', '-')}"
    assert main(["sample", "NO_SUCH_RUN", flag, value, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{flag} was renamed {new_flag}: use {new_flag} {value}" in err[0]
