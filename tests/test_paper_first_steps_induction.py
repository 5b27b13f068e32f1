"""Issue 34: the induction `paper` preset at its real shapes (d_model 512, 16 heads, length 512, depths 1-3, BPE
8192) for 2 optimizer steps per model on the CPU, through every analysis and claim (scripts/paper_first_steps.py)."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlmlab.studies.induction import CLAIM_IDS
from dlmlab.studies.induction.presets import PRESETS, first_steps

ROOT = Path(__file__).resolve().parents[1]


def test_first_steps_keeps_the_shapes_and_fits_the_config_checks():
    paper, p = PRESETS["paper"], first_steps(PRESETS["paper"], 2)
    p.validate()  # issue 34: text_steps was left at 4000 > steps before
    keep = ("d_model", "n_heads", "seq_len", "depths", "tokenizer", "bpe_vocab", "positions", "ar_min_depth")
    assert {k: getattr(p, k) for k in keep} == {k: getattr(paper, k) for k in keep}
    assert (p.steps, p.text_steps, p.seeds, p.steer_prompts) == (2, 1, 1, 0)
    assert first_steps(paper, 1).text_steps == 0 and first_steps(paper, 1).validate() is None


@pytest.mark.study
def test_paper_first_steps_complete_every_analysis_and_claim(tmp_path):
    # both cores of the 2-core CI machine (results do not depend on the worker count: tests/test_parallel.py)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "DLMLAB_WORKERS": "2"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "paper_first_steps.py"), "--out", str(tmp_path),
                        "--steps", "2", "--study", "induction", "--timeout", "1500"], env=env, capture_output=True,
                       text=True, timeout=1600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "induction" / "results.json").read_text())
    cfg = res["config"]
    assert (cfg["d_model"], cfg["n_heads"], cfg["seq_len"], cfg["steps"]) == (512, 16, 512, 2)
    assert [c["id"] for c in res["claims"]] == list(CLAIM_IDS)
    models = res["results"]["models"]
    assert set(models) == {f"{o}_L{L}" for o in ("ar", "dlm") for L in (1, 2, 3)}
    m = models["dlm_L3"]  # every analysis ran at the paper's shapes
    for key in ("accuracy", "few_ids", "induction_set_ablation", "fold", "composition_into_top_head",
                "composition_into_top_head_init", "probe", "probe_full_range", "patch", "local_window", "gains",
                "emergence", "heads_twoways"):
        assert key in m, key
    assert len(m["prev_token_scores"][0]) == 16 and m["emergence"]["curve"][-1][0] == 2
    steer = next(c for c in res["claims"] if c["id"] == "mask_rate_steering")
    assert steer["reason"] == "not_run"  # first steps run no steering (see presets.first_steps)
