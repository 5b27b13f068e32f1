"""The state study's `paper` preset at its real model shapes for 2 optimizer steps per model, through every analysis
and claim (issue 34, section 4): `scripts/paper_first_steps.py` with `presets.first_steps`, on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlmlab.studies.state.presets import PRESETS, first_steps
from dlmlab.studies.state.seeds import SEED_REFS

ROOT = Path(__file__).resolve().parents[1]


def test_first_steps_keeps_the_paper_shapes_and_caps_the_steps():
    paper = PRESETS["paper"]
    p = first_steps(paper, 2)
    p.validate()
    assert (p.d_model, p.n_layers, p.archs, p.tasks, p.train_len, p.eval_lens, p.conv_seeds, p.patch_all_positions) \
        == (paper.d_model, paper.n_layers, paper.archs, paper.tasks, paper.train_len, paper.eval_lens,
            paper.conv_seeds, paper.patch_all_positions)
    assert p.default_steps == 2 and all(v <= 2 for v in p.steps.values()) and not p.until_learned
    assert p.control_draws == paper.control_draws >= 200  # the control's size is not reduced, only its sequences


@pytest.mark.study  # about a minute of CPU: 35 models at d_model 128, 4 layers, 2 steps each, every analysis
def test_paper_first_steps_complete_every_analysis_and_claim(tmp_path):
    # both cores of the 2-core CI machine (results do not depend on the worker count: tests/test_parallel.py)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", DLMLAB_WORKERS="2")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "paper_first_steps.py"), "--out", str(tmp_path),
                    "--steps", "2", "--child", "state"], env=env, check=True, timeout=1200)
    data = json.loads((tmp_path / "state" / "results.json").read_text())
    assert data["preset"] == "paper" and {c["id"] for c in data["claims"]} == set(SEED_REFS)
    assert all(c.get("seed_says") and "study_effect" in c for c in data["claims"])
    paper = PRESETS["paper"]
    cells = data["results"]["cells"]
    assert {(c["arch"], c["task"]) for c in cells} | {(a, "?") for a in data["results"]["unavailable"]} >= \
        {(a, t) for a in paper.archs for t in paper.tasks if a not in data["results"]["unavailable"]}
    for c in cells:
        assert c["steps_trained"] == 2 and len(c["probes"]) == paper.n_layers + 1
        assert {"ablation", "control", "control_ood", "layer_ablation_drop", "patching"} <= set(c), c["arch"]
        assert len(c["patching"]["positions"]) == paper.train_len  # every position (the paper setting)
    conv = {(c["arch"], c["task"], c["seed"]) for c in data["results"]["conv_runs"]}
    assert {("mamba-noconv", t, s) for t in paper.conv_tasks for s in range(paper.conv_seeds)} <= conv
    assert (tmp_path / "state" / "report.md").exists()
