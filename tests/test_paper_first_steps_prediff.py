"""The PreDiff `paper` preset's first steps on this machine (issue 34, section 4): a random-weight GPT-2 of the
124M shape, two optimizer steps per model, through every method, analysis and claim
(`scripts/paper_first_steps.py --steps 2 --random-gpt2 --study prediff`, which calls `presets.first_steps`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlmlab.prediff import METHODS
from dlmlab.studies.prediff.presets import PRESETS, first_steps
from dlmlab.studies.prediff.seeds import SEED_REFS

ROOT = Path(__file__).resolve().parents[1]


def test_first_steps_keeps_the_paper_shapes_and_cuts_the_rest():
    paper = PRESETS["paper"]
    p = first_steps(paper, 2)
    p.validate()
    assert paper.device == "auto" and p.resolved_device() in ("cpu", "cuda")  # no hard-coded cuda (issue 34)
    assert (p.model, p.backbone_path, p.corpus, p.methods) == (paper.model, paper.backbone_path, paper.corpus,
                                                               paper.methods)
    assert p.adapt.steps == 2 and p.adapt.lr == paper.adapt.lr and p.curve_every == 2 and p.speed_repeats == 3
    assert first_steps(paper, 1).adapt.steps == 1


@pytest.mark.study
def test_paper_first_steps_run_on_cpu(tmp_path):
    # both cores of the 2-core CI machine (results do not depend on the worker count: tests/test_parallel.py)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "DLMLAB_WORKERS": "2"}
    env.pop("DLMLAB_GPT2_DIR", None), env.pop("DLMLAB_WIKITEXT103", None)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "paper_first_steps.py"), "--out", str(tmp_path),
                           "--steps", "2", "--random-gpt2", "--study", "prediff", "--timeout", "1500"],
                          capture_output=True, text=True, env=env, timeout=1600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = json.loads(proc.stdout.splitlines()[0])
    assert row["study"] == "prediff" and row["rc"] == 0 and row["claims"] == len(SEED_REFS)
    data = json.loads((tmp_path / "prediff" / "results.json").read_text())
    gpt2 = json.loads((tmp_path / "gpt2-random" / "config.json").read_text())
    assert (gpt2["n_layer"], gpt2["n_embd"], gpt2["n_head"], gpt2["n_positions"]) == (12, 768, 12, 1024)
    assert data["config"]["device"] == "cpu" and data["config"]["adapt"]["steps"] == 2
    r = data["results"]
    assert set(r["methods"]) == set(METHODS)
    for m in r["methods"].values():  # two steps per model, a curve point at 0 and at the end
        assert [x["step"] for x in m["curve"]] == [0, 2]
    assert {"hybrid_vs_uniform_bidir", "combined_vs_attention_only", "combined_vs_objective_only",
            "ar_control_vs_best_diffusion", "ar_init_vs_scratch_steps"} <= set(r["comparisons"])
    assert {"prediff@8", "ar_control"} <= set(r["samples"]) and len(r["speed"]["prediff@8"]["times_s"]) == 3
    assert "lambada" in r and "human_preference" in r and r["threshold"] is not None
    assert {c["id"] for c in data["claims"]} == set(SEED_REFS)
    assert all(c["verdict"] in ("reproduced", "contradicted", "inconclusive") and c["seed_ref"] for c in data["claims"])
    assert (tmp_path / "prediff" / "report.md").exists()
    assert all((tmp_path / "prediff" / f["path"]).exists() for f in data["figures"])
