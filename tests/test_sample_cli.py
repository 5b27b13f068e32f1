"""`dlmlab sample` end to end on a tiny mdlm run trained for a few steps: prompt, unconditional, infilling, JSONL."""

import json

import pytest
import torch

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
                 "--batch-size", "2", "--threshold", "0.5", "--block-len", "4", "--kv-reuse", "prefix",
                 "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("--- sample") == 3 == printed.count("(approximate: kv_reuse prefix) ---")
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
    args = ["sample", str(run_dir), "--gen-len", "8", "--format", "jsonl", "--no-progress", "--unmask-rule", "ancestral",
            "--steps", "6"]
    assert main(args + ["--noise", "cosine"]) == 0
    r = json.loads(capsys.readouterr().out.strip())
    assert r["config"]["noise"]["name"] == "cosine" and len(r["filled_ids"]) == 8
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
    assert main(["sample", str(run), "--kv-reuse", "prefix", "--no-progress"]) == 2  # no KV cache
    assert "kv_reuse='none'" in capsys.readouterr().err


# ---- ids the tokenizer cannot decode (a vocabulary with reserved ids above the tokenizer's, as in the induction study)
RESERVED = 40


def _reserved_ids_run(tmp_path, objective: str):
    """A tiny untrained-ish model whose vocabulary is the char tokenizer's + RESERVED ids (+ the mask, mdlm):
    at temperature 1 most sampled ids are reserved ones the tokenizer cannot decode."""
    from dlmlab.data.tokenizer import CharTokenizer
    from dlmlab.models import Transformer, TransformerConfig
    from dlmlab.training import TrainConfig, train

    tok = CharTokenizer(list("ab c."))
    mdlm = objective == "mdlm"
    vocab = tok.vocab_size + RESERVED + (1 if mdlm else 0)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=vocab, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
                                          max_seq_len=16, attn_mask="bidirectional" if mdlm else "causal"))
    run = tmp_path / objective
    from dlmlab.objectives import ARObjective, MaskedDiffusionObjective

    train(model, TrainConfig(steps=1, batch_size=2, lr=1e-6, progress=False),
          lambda step, g: torch.randint(0, tok.vocab_size, (2, 8), generator=g),
          MaskedDiffusionObjective(vocab - 1) if mdlm else ARObjective(), out_dir=run, tokenizer=tok)
    return run, tok


@pytest.mark.parametrize("objective", ["mdlm", "ar"])
def test_ids_the_tokenizer_cannot_decode_are_shown_not_fatal(tmp_path, capsys, objective):
    run, tok = _reserved_ids_run(tmp_path, objective)
    out = tmp_path / "s.jsonl"
    args = ["sample", str(run), "--prompt", "ab", "--gen-len", "8", "--num-samples", "2", "--temperature", "1",
            "--no-progress", "--out", str(out)]
    capsys.readouterr()
    assert main(args) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    ids = [i for r in rows for i in r["filled_ids" if objective == "mdlm" else "generated_ids"]]
    reserved = sorted({i for i in ids if i >= tok.vocab_size})
    assert reserved and all(len(r["filled_ids" if objective == "mdlm" else "generated_ids"]) == 8 for r in rows)
    for i in reserved:  # shown in the text output and in the rows' text; the raw ids stay in the JSONL
        assert f"[id {i}]" in printed and any(f"[id {i}]" in r["full"] for r in rows)
    for r in rows:
        assert r["full"].startswith("ab")
        gen = r["filled_ids" if objective == "mdlm" else "generated_ids"]
        assert r["text"] == "".join(f"[id {i}]" if i >= tok.vocab_size else tok.decode([i]) for i in gen)


def test_show_text_names_undecodable_ids_and_only_the_models_own_mask():
    from dlmlab.cli.sample_cmd import show_text
    from dlmlab.data.tokenizer import CharTokenizer

    tok = CharTokenizer(list("ab c."))  # ids 0..4; a dlmlab mdlm run's mask would be 5
    assert show_text(tok, [0, 1, 2]) == tok.decode([0, 1, 2]) == "ab "
    assert show_text(tok, [0, 5, 1], mask_id=5) == "a[M]b"  # the usual layout: the tokenizer's own reading
    assert show_text(tok, [0, 5, 45, 1, 24], mask_id=45) == "a[id 5][M]b[id 24]"  # reserved ids 5..44, mask 45
    assert show_text(tok, [1, 5, 7]) == "b[id 5][id 7]"  # an AR model has no mask
