"""`dlmlab sample` end to end on a tiny mdlm run trained for a few steps: prompt, unconditional, infilling, JSONL."""

import json

import pytest

from dlmlab.cli.main import main

CFG = ("objective: {obj}\nmodel: {{d_model: 16, n_layers: 1, n_heads: 2, attn_mask: {mask}, max_seq_len: 32}}\n"
       "data: {{seq_len: 16}}\ntrain: {{steps: 3, batch_size: 4, progress: false}}\neval_batches: 1\n")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("sample")
    cfg = d / "c.yaml"
    cfg.write_text(CFG.format(obj="mdlm", mask="bidirectional"))
    assert main(["train", str(cfg), "--out", str(d / "run")]) == 0
    return d / "run"


def test_prompted_samples_as_text_and_jsonl(run_dir, tmp_path, capsys):
    capsys.readouterr()
    out = tmp_path / "s.jsonl"
    assert main(["sample", str(run_dir), "--prompt", "The ", "--gen-len", "10", "--num-samples", "3",
                 "--batch-size", "2", "--threshold", "0.5", "--block-len", "4", "--cache", "prefix",
                 "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("--- sample") == 3 == printed.count("(approximate: cache prefix) ---")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert r["full"].startswith("The ") and len(r["filled_ids"]) == 10 and r["exactness"] == "approximate"


def test_unconditional_and_infilling(run_dir, capsys):
    capsys.readouterr()
    assert main(["sample", str(run_dir), "--gen-len", "12", "--format", "jsonl", "--no-progress",
                 "--order", "margin", "--steps", "4"]) == 0
    r = json.loads(capsys.readouterr().out.strip())
    assert r["prompt"] == "" and len(r["filled_ids"]) == 12
    ck = sorted((run_dir / "checkpoints").glob("step_*"))[-1]
    assert main(["sample", str(ck), "--infill", "the [MASK:3] of [MASK]", "--format", "jsonl", "--no-progress"]) == 0
    r = json.loads(capsys.readouterr().out.strip())
    assert len(r["filled_ids"]) == 4 and r["full"].startswith("the ") and " of " in r["full"]


def test_bad_input_is_a_one_line_error(run_dir, tmp_path, capsys):
    assert main(["sample", str(run_dir), "--infill", "no span", "--no-progress"]) == 2
    assert "[MASK" in capsys.readouterr().err
    assert main(["sample", str(run_dir), "--gen-len", "40", "--no-progress"]) == 2  # 40 > max_seq_len 32 (learned positions)
    capsys.readouterr()
    assert main(["sample", str(run_dir), "--threshold", "2", "--no-progress"]) == 2
    assert "threshold" in capsys.readouterr().err
    cfg = tmp_path / "ar.yaml"
    cfg.write_text(CFG.format(obj="ar", mask="causal"))
    assert main(["train", str(cfg), "--out", str(tmp_path / "ar")]) == 0
    capsys.readouterr()
    assert main(["sample", str(tmp_path / "ar"), "--no-progress"]) == 2  # an AR model samples after a prompt
    assert "--prompt" in capsys.readouterr().err
    assert main(["sample", str(tmp_path / "ar"), "--infill", "a [MASK] b", "--no-progress"]) == 2
    assert "infill" in capsys.readouterr().err


def test_ancestral_rule_follows_the_chosen_noise_schedule(run_dir, capsys):
    capsys.readouterr()
    args = ["sample", str(run_dir), "--gen-len", "8", "--format", "jsonl", "--no-progress", "--schedule", "ancestral",
            "--steps", "6"]
    assert main(args + ["--noise", "cosine"]) == 0
    r = json.loads(capsys.readouterr().out.strip())
    assert r["config"]["noise"] == "cosine" and len(r["filled_ids"]) == 8
    assert main(args + ["--noise", "sigmoid"]) == 2
    assert "noise" in capsys.readouterr().err


@pytest.mark.parametrize("family", ["mamba", "mamba2", "lstm", "gru"])
def test_a_causal_family_trained_with_mdlm_samples_through_dlmlab_load(tmp_path, capsys, family):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat on the mat. The dog ran to it. " * 30)
    cfg = tmp_path / f"{family}.yaml"
    cfg.write_text(f"objective: mdlm\nmodel: {{family: {family}, d_model: 16, n_layers: 1}}\n"
                   f"data: {{source: {corpus}, seq_len: 16}}\ntrain: {{steps: 2, batch_size: 4, progress: false}}\n"
                   "eval_batches: 1\n")
    run = tmp_path / family
    assert main(["train", str(cfg), "--out", str(run)]) == 0
    capsys.readouterr()
    ck = sorted((run / "checkpoints").glob("step_*"))[-1]
    for path in (run, ck):  # the run folder and one of its checkpoints
        assert main(["sample", str(path), "--prompt", "The ", "--gen-len", "6", "--format", "jsonl",
                     "--no-progress", "--num-samples", "2"]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert len(rows) == 2 and all(r["full"].startswith("The ") and len(r["filled_ids"]) == 6 for r in rows)
    assert main(["sample", str(run), "--infill", "The [MASK:3] sat", "--format", "jsonl", "--no-progress"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["full"].startswith("The ") and r["full"].endswith(" sat") and len(r["filled_ids"]) == 3
    assert main(["sample", str(run), "--cache", "prefix", "--no-progress"]) == 2  # no KV cache
    assert "cache='none'" in capsys.readouterr().err
