"""`dlmlab compare` on training runs (and checkpoint folders); mixing one with a reproduction run is one line."""

from __future__ import annotations

import json

from dlmlab.cli.main import main
from run_util import write_corpus


def _train_cfg(tmp_path, name="c.yaml", lr=1e-3, model="{d_model: 16, n_layers: 1, n_heads: 2, d_mlp: 32, max_seq_len: 16}",
               steps=2):
    cfg = tmp_path / name
    cfg.write_text(f"objective: ar\nmodel: {model}\ndata: {{source: {write_corpus(tmp_path)}, seq_len: 12}}\n"
                   f"train: {{steps: {steps}, batch_size: 4, lr: {lr}, progress: false}}\neval_batches: 1\n")
    return cfg


def test_compare_accepts_two_train_runs(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["train", str(_train_cfg(tmp_path, "a.yaml", lr=1e-3)), "--out", str(a)]) == 0
    assert main(["train", str(_train_cfg(tmp_path, "b.yaml", lr=3e-3)), "--out", str(b)]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "(training run)" in out and "== train ==" in out
    assert "config.train.lr" in out  # the config difference, with both values
    assert "eval.nll" in out  # the held-out loss moved with the learning rate
    assert main(["compare", str(a), str(a), "--exit-code"]) == 0  # a run equals itself
    assert main(["compare", str(a), str(b), "--exit-code"]) == 1
    # a checkpoint folder is a training run too; mixing with a reproduction run is one line
    ck = sorted((a / "checkpoints").iterdir())[-1]
    capsys.readouterr()
    assert main(["compare", str(ck), str(b)]) == 0
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "results.json").write_text(json.dumps({"study": "state", "results": {"x": 1}}))
    assert main(["compare", str(a), str(tmp_path / "study")]) == 2
    err = capsys.readouterr().err
    assert "is a training run but" in err and len(err.strip().splitlines()) == 1
