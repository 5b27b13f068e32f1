"""The `dlmlab` command line: help text, one-line errors with exit code 2, train + eval end to end."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dlmlab.cli.main import COMMANDS, build_parser, main

DLMLAB = str(Path(sys.executable).parent / "dlmlab")


def test_top_level_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("train", "eval", "reproduce"):
        assert cmd in out and COMMANDS[cmd].split()[0] in out
    assert "examples:" in out and "torchrun" in out


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_train_help(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for flag in ("config", "--out", "--no-resume", "--steps", "metrics.jsonl", "torchrun"):
        assert flag in out, flag


@pytest.mark.parametrize("text,msg", [
    ("model:\n  d_model: [1\n", "is not valid YAML"),
    ("model:\n  d_modl: 3\n", "unknown field 'model.d_modl'"),
    ("train:\n  steps: abc\n", "train.steps: expected an integer"),
])
def test_bad_yaml_is_a_one_line_error_exit_2(tmp_path, subprocess_env, text, msg):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    r = subprocess.run([DLMLAB, "train", str(cfg), "--out", str(tmp_path / "d")], env=subprocess_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlmlab train: error:") and msg in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_missing_files_are_one_line_errors(tmp_path, capsys):
    assert main(["train", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "d")]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert main(["eval", str(tmp_path)]) == 2
    assert "not a dlmlab run directory" in capsys.readouterr().err


def test_train_then_eval_in_process(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("objective: mdlm\nmodel: {d_model: 16, n_layers: 1, n_heads: 2, attn_mask: bidirectional, "
                   "max_seq_len: 16}\ndata: {seq_len: 16}\ntrain: {steps: 4, batch_size: 4, progress: false}\n"
                   "eval_batches: 1\n")
    out = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(printed["eval"]) == {"nelbo", "ppl_bound"}
    assert printed["eval"]["ppl_bound"] == pytest.approx(math.exp(printed["eval"]["nelbo"]), rel=1e-6)
    assert main(["eval", str(out)]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again == pytest.approx(printed["eval"])
    # same --out, different config -> a clear error instead of silently mixing runs
    cfg.write_text(cfg.read_text().replace("steps: 4", "steps: 5"))
    assert main(["train", str(cfg), "--out", str(out)]) == 2
    assert "different config" in capsys.readouterr().err


def test_parser_builds_every_registered_command():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"train", "eval"} <= set(sub.choices)


@pytest.mark.parametrize("bad", ["0", "two"])
def test_reproduce_rejects_a_bad_worker_count(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["reproduce", "induction", "--preset", "smoke", "--out", str(tmp_path), "--workers", bad])
    assert e.value.code == 2
    assert "--workers" in capsys.readouterr().err and not any(tmp_path.iterdir())
