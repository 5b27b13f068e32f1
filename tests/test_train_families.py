"""`run_training` on every family: a run killed mid-way resumes to exactly the losses of an uninterrupted one,
and its final model equals what dlmlab.load reads back."""

from __future__ import annotations

import json

import pytest
import torch

import dlmlab
from dlmlab.training import loop
from dlmlab.training.lm import RunConfig, run_training

MODELS = {
    "mamba": {"family": "mamba", "d_model": 16, "n_layers": 1, "d_state": 4, "scan": "chunked"},
    "mamba2": {"family": "mamba2", "d_model": 16, "n_layers": 1, "d_state": 8, "headdim": 8},
    "lstm": {"family": "lstm", "d_model": 16, "n_layers": 2},
    "gru": {"family": "gru", "d_model": 16, "n_layers": 2, "residual": True},
}


def config(tmp_path, family: str, objective: str) -> RunConfig:
    text = "abcabd abdcab cabbad dabcab " * 60
    (tmp_path / "c.txt").write_text(text)
    return RunConfig(model=MODELS[family], objective=objective, eval_batches=1,
                     data={"source": str(tmp_path / "c.txt"), "seq_len": 12},
                     train={"steps": 4, "batch_size": 4, "ckpt_every": 2, "log_every": 1, "progress": False})


def losses(out):
    return [(r["step"], r["loss"]) for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())]


@pytest.mark.parametrize("family,objective", [("mamba", "ar"), ("mamba2", "mdlm"), ("lstm", "mdlm"), ("gru", "ar")])
def test_resume_is_exact_for_every_family(tmp_path, monkeypatch, family, objective):
    cfg = config(tmp_path, family, objective)
    full = run_training(cfg, tmp_path / "full")
    real_lr_at = loop.lr_at

    def crash_at_3(c, step):
        if step == 3:
            raise RuntimeError("simulated crash")
        return real_lr_at(c, step)

    monkeypatch.setattr(loop, "lr_at", crash_at_3)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_training(cfg, tmp_path / "res")
    monkeypatch.undo()
    resumed = run_training(cfg, tmp_path / "res")
    assert losses(tmp_path / "res") == losses(tmp_path / "full")
    assert resumed["eval"] == full["eval"]
    a, b = dlmlab.load(tmp_path / "full"), dlmlab.load(tmp_path / "res")
    assert a.family == family and a.objective == objective
    for (k, v), (k2, v2) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
