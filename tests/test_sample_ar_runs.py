"""`dlmlab sample` on AR runs of every family: KV-cached where the model takes a cache, the same tokens as
``sample_ar`` without one."""

from __future__ import annotations

import json

import pytest
import torch

from dlmlab.cli.main import main
from dlmlab.rundir.load import load
from dlmlab.sampling.ar import sample_ar
from run_util import write_run_cfg


@pytest.mark.parametrize("family", ["transformer", "mamba", "mamba2", "lstm", "gru"])
def test_dlmlab_sample_on_an_ar_run_of_every_family(tmp_path, capsys, family):
    run = tmp_path / "run"
    assert main(["train", str(write_run_cfg(tmp_path, "ar", family, steps=2)), "--out", str(run)]) == 0
    capsys.readouterr()
    args = ["sample", str(run), "--prompt", "The ", "--gen-len", "6", "--num-samples", "3", "--batch-size", "2",
            "--format", "jsonl", "--no-progress", "--temperature", "0", "--seed", "3"]
    assert main(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert all(r["full"].startswith("The ") and len(r["generated_ids"]) == 6 and r["objective"] == "ar"
               and r["family"] == family for r in rows)
    assert all(r["kv_cache"] is (family == "transformer") for r in rows)  # KV-cached where the model takes a cache
    # the same tokens as sample_ar without a cache (greedy, so float rounding of the cached path cannot flip a draw)
    loaded = load(run)
    ids = loaded.tokenizer.encode("The ")
    ref = sample_ar(loaded.model, torch.tensor([ids]), 6, 0.0, 1.0, torch.Generator().manual_seed(3), use_cache=False)
    assert rows[0]["generated_ids"] == ref[0, len(ids):].tolist()
