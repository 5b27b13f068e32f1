"""A single study under `torchrun`: training is data-parallel, rank 0 alone writes, results match 1 process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

pytestmark = pytest.mark.study  # torchrun and smoke studies: outside `make test-fast`


def _reproduce(cmd_prefix: list[str], out: Path, env: dict) -> subprocess.CompletedProcess:
    cmd = [*cmd_prefix, "reproduce", "induction", "--preset", "smoke", "--out", str(out), "--no-progress"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not (BIN / "torchrun").exists(), reason="torchrun not installed")
def test_induction_smoke_under_torchrun_matches_one_process(tmp_path, subprocess_env):
    one = _reproduce([str(BIN / "dlmlab")], tmp_path / "one", subprocess_env)
    assert one.returncode == 0, one.stderr[-2000:]
    two = _reproduce([str(BIN / "torchrun"), "--nproc_per_node", "2", "--standalone", "-m", "dlmlab.cli.main"],
                     tmp_path / "two", subprocess_env)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("results:") == 1  # only rank 0 reports
    a = json.loads((tmp_path / "one" / "results.json").read_text())
    b = json.loads((tmp_path / "two" / "results.json").read_text())
    assert set(a["results"]["models"]) == set(b["results"]["models"])
    for key, m in a["results"]["models"].items():
        assert b["results"]["models"][key]["train"]["final_loss"] == pytest.approx(m["train"]["final_loss"], rel=1e-5)
    assert [(c["id"], c["holds"]) for c in a["claims"]] == [(c["id"], c["holds"]) for c in b["claims"]]
    figs = sorted(p.name for p in (tmp_path / "two" / "figures").iterdir())
    assert figs == sorted(Path(f["path"]).name for f in b["figures"])  # no stray temp files from other ranks
    # every run directory holds one rank's checkpoints and metrics, not two ranks' interleaved lines
    for run in (tmp_path / "two" / "runs").iterdir():
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == sorted(set(steps))
