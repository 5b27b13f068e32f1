"""A run's checkpoints by step: ``load(run, step=N)`` and ``dlmlab sample --step``, a finished run extended with
``dlmlab train --steps M`` like one longer run, and checkpoint pruning that says what it keeps."""

from __future__ import annotations

import json
import re

import pytest
import torch

from dlmlab.cli.main import main
from dlmlab.errors import UserError
from dlmlab.rundir.load import load
from run_util import write_run_cfg


def test_load_picks_checkpoint_n_of_a_run(tmp_path, capsys):
    run = tmp_path / "run"
    cfg = write_run_cfg(tmp_path, "ar", steps=3, train_extra=", ckpt_every: 1, keep_checkpoints: 0")
    assert main(["train", str(cfg), "--out", str(run)]) == 0
    latest, two = load(run), load(run, step=2)
    assert (latest.step, two.step) == (3, 2)
    ref = load(run / "checkpoints" / "step_0000002")
    for (k, a), b in zip(two.model.state_dict().items(), ref.model.state_dict().values()):
        assert torch.equal(a, b), k
    assert not all(torch.equal(a, b) for a, b in zip(two.model.state_dict().values(),
                                                     latest.model.state_dict().values()))
    with pytest.raises(UserError, match=r"no checkpoint of step 7 .*steps: 1, 2, 3") as e:
        load(run, step=7)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="run folder"):
        load(run / "checkpoints" / "step_0000002", step=2)
    capsys.readouterr()
    assert main(["sample", str(run), "--step", "2", "--prompt", "The ", "--gen-len", "3", "--format", "jsonl",
                 "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 2
    assert main(["sample", str(run), "--step", "9", "--prompt", "The ", "--no-progress"]) == 2
    assert "no checkpoint of step 9" in capsys.readouterr().err


def test_train_steps_extends_a_finished_run_like_one_longer_run(tmp_path, capsys):
    # a constant learning rate, so the extended run must equal a fresh 5-step run exactly (exact resume)
    cfg = write_run_cfg(tmp_path, "ar", steps=3, train_extra=", schedule: constant, log_every: 1")
    ext, fresh = tmp_path / "ext", tmp_path / "fresh"
    assert main(["train", str(cfg), "--out", str(ext)]) == 0
    assert load(ext).step == 3
    capsys.readouterr()
    assert main(["train", str(cfg), "--out", str(ext), "--steps", "5"]) == 0
    assert "from its checkpoint at step 3 to 5 steps" in capsys.readouterr().err
    assert main(["train", str(cfg), "--out", str(fresh), "--steps", "5"]) == 0
    a, b = load(ext), load(fresh)
    assert a.step == b.step == 5
    for (k, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(x, y), k
    rows = [json.loads(line) for line in (ext / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert json.loads((ext / "config.json").read_text())["train"]["steps"] == 5
    capsys.readouterr()
    assert main(["train", str(cfg), "--out", str(ext), "--steps", "4"]) == 2  # fewer than it has trained
    err = capsys.readouterr().err
    assert "trained 5 steps" in err and err.count("\n") == 1


def test_pruning_prints_one_line_naming_kept_and_removed_checkpoints(tmp_path, capsys):
    from dlmlab.rundir.checkpoint import list_checkpoints, save_checkpoint

    m = torch.nn.Linear(2, 2)
    for step in (1, 2):
        save_checkpoint(tmp_path, step, m, None, {}, keep=2)
    assert capsys.readouterr().err == ""  # nothing removed, nothing said
    save_checkpoint(tmp_path, 3, m, None, {}, keep=2)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert re.search(r"kept step_0000002, step_0000003; removed step_0000001 \(train.keep_checkpoints = 2", err)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]
