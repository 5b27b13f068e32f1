"""The reversal study's ``paper`` preset at its real shapes for two optimizer steps per model (issue 34, section 4):
every part (one-layer grid, fixed-layout pair task, multi-layer part, real data), every analysis and every claim."""

from __future__ import annotations

import json

import pytest

from dlmlab.studies.reversal.presets import PRESETS, first_steps
from dlmlab.studies.reversal.run import run_preset
from dlmlab.studies.reversal.seeds import SEED_REFS


def test_first_steps_keeps_the_paper_shapes_and_caps_the_rest():
    paper = PRESETS["paper"]
    fs = first_steps(paper, 2)
    fs.validate()
    assert (fs.model, fs.multilayer, fs.task, fs.pair_task, fs.pair_model) == \
        (paper.model, paper.multilayer, paper.task, paper.pair_task, paper.pair_model)
    assert (fs.real.model, fs.real.n_facts, fs.real.positions, fs.kinds, fs.positions) == \
        (paper.real.model, paper.real.n_facts, paper.real.positions, paper.kinds, paper.positions)
    assert fs.train.steps == fs.real.train.steps == 2 and fs.train.batch_size == 8 and len(fs.seeds) == 3
    assert paper.train.steps == 20000  # the preset itself is untouched


@pytest.mark.study
def test_paper_first_steps_run_every_part_analysis_and_claim(tmp_path, monkeypatch):
    # both cores of the 2-core CI machine (results do not depend on the worker count: tests/test_parallel.py)
    monkeypatch.setenv("DLMLAB_WORKERS", "2")
    cfg = first_steps(PRESETS["paper"], 2)
    run_preset(cfg, "paper", tmp_path, progress=False)
    data = json.loads((tmp_path / "results.json").read_text())
    assert {c["id"] for c in data["claims"]} == set(SEED_REFS)
    assert all(c["verdict"] in ("reproduced", "contradicted", "inconclusive") for c in data["claims"])
    res = data["results"]
    n_grid = len(cfg.seeds) * len(cfg.positions)
    assert len(res["runs"]) == n_grid * len(cfg.kinds) and len(res["multilayer"]["runs"]) == n_grid * len(cfg.kinds)
    assert len(res["pair"]["runs"]) == n_grid * sum(k.startswith("mdm") for k in cfg.kinds)
    for r in res["runs"] + res["multilayer"]["runs"] + res["pair"]["runs"]:
        assert [h["step"] for h in r["history"]] == [0, 2], (r["kind"], r["positions"], r["part"])  # log at 0, end
        assert "storage_margin" in r["diagnostics"]
        if r["kind"].startswith("mdm") and r["part"] != "pair":
            assert len(r["diagnostics"]["corr_by_distance"]) == cfg.max_distance  # the attention signatures
    assert {r["params"] for r in res["runs"] if r["kind"] == "mdm"} != set()
    real = res["real"]["runs"]
    assert len(real) == 3 * len(cfg.real.positions) * 2
    assert all("forward_train_acc_per_token" in r and "reverse_acc_per_token" in r for r in real)
    assert any(t["title"].startswith("Real data") for t in data["tables"])
