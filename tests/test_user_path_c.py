"""A new user's path end to end (issue 23, items 6 and 7): `dlmlab compare` on training runs, `dlmlab rate` on
`dlmlab sample --out` files, a wrong $DLMLAB_DATA, `dlmlab eval` on a Hugging Face folder, and `dlmlab train`
building the same model as `build_model` for the same model section."""

from __future__ import annotations

import json

import pytest
import torch

from dlmlab.cli.main import main


def _corpus(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("the cat sat on the mat. the dog ran to it. " * 40)
    return p


def _train_cfg(tmp_path, name="c.yaml", lr=1e-3, model="{d_model: 16, n_layers: 1, n_heads: 2, d_mlp: 32, max_seq_len: 16}",
               steps=2):
    cfg = tmp_path / name
    cfg.write_text(f"objective: ar\nmodel: {model}\ndata: {{source: {_corpus(tmp_path)}, seq_len: 12}}\n"
                   f"train: {{steps: {steps}, batch_size: 4, lr: {lr}, progress: false}}\neval_batches: 1\n")
    return cfg


# ------------------------------------------------------------------------- item 6: compare training runs
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


# ------------------------------------------------------------------------- item 6: rate `dlmlab sample --out`
def _sample_rows(prompt_texts, config):
    """Lines as `dlmlab sample --out` writes them (cli/sample_cmd.py)."""
    return [{"index": i, "prompt": p, "text": t, "full": p + t, "filled_ids": [1, 2], "steps": 4, "forwards": 4,
             "cache": "none", "exactness": "exact", "config": config} for i, (p, t) in enumerate(prompt_texts)]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rate_accepts_sample_out_files(tmp_path, capsys):
    from dlmlab.rating import all_pairs, load_samples
    from dlmlab.rating.server import RatingApp

    base = {"steps": 64, "order": "confidence", "threshold": None, "cache": "none"}
    a = _write_jsonl(tmp_path / "conf.jsonl", _sample_rows([("ROMEO:", " o"), ("JULIET:", " ay")], base))
    b = _write_jsonl(tmp_path / "rand.jsonl", _sample_rows([("ROMEO:", " no"), ("JULIET:", " me")],
                                                           dict(base, order="random")))
    samples = load_samples([a, b])
    assert {s.method for s in samples} == {"conf order=confidence", "rand order=random"}
    pairs = all_pairs(samples)
    assert len(pairs) == 2 and {p.prompt for p in pairs} == {"ROMEO:", "JULIET:"}
    # one file holding both settings: the method is the setting that differs
    both = _write_jsonl(tmp_path / "both.jsonl", [json.loads(x) for f in (a, b) for x in f.read_text().splitlines()])
    assert {s.method for s in load_samples(both)} == {"order=confidence", "order=random"}
    app = RatingApp([a, b], tmp_path / "r.sqlite", seed=0)
    assert len(app.pairs) == 2
    # the command takes several files; the database goes beside the first
    assert main(["rate", str(a), str(b), "--report"]) == 2
    assert "no ratings database at " + str(tmp_path / "ratings.sqlite") in capsys.readouterr().err
    from dlmlab.rating import RatingStore

    p = pairs[0]
    RatingStore(tmp_path / "ratings.sqlite").record(p, p.a, p.b, "left")
    assert main(["rate", str(a), str(b), "--report"]) == 0
    assert "conf order=confidence" in capsys.readouterr().out
    # one sampling run alone has a single method: the error says there is nothing to compare
    assert main(["rate", str(a), "--port", "0"]) == 2
    assert "two different methods" in capsys.readouterr().err


def test_rate_reads_what_dlmlab_sample_writes(tmp_path, capsys):
    from dlmlab.rating import all_pairs, load_samples

    cfg = tmp_path / "m.yaml"
    cfg.write_text("objective: mdlm\nmodel: {d_model: 16, n_layers: 1, n_heads: 2, d_mlp: 32, max_seq_len: 16, "
                   f"attn_mask: bidirectional}}\ndata: {{source: {_corpus(tmp_path)}, seq_len: 12}}\n"
                   "train: {steps: 1, batch_size: 4, progress: false}\neval_batches: 1\n")
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(run)]) == 0
    files = []
    for order in ("confidence", "random"):
        files.append(tmp_path / f"{order}.jsonl")
        assert main(["sample", str(run), "--prompt", "the cat", "--gen-len", "4", "--num-samples", "2",
                     "--order", order, "--no-progress", "--out", str(files[-1])]) == 0
    capsys.readouterr()
    samples = load_samples(files)
    assert {s.method for s in samples} == {"confidence order=confidence", "random order=random"}
    n = {m: sum(s.method == m for s in samples) for m in {s.method for s in samples}}
    assert all(s.prompt == "the cat" for s in samples) and len(all_pairs(samples)) == n[min(n)] * n[max(n)]


# ------------------------------------------------------------------------- item 6: a wrong $DLMLAB_DATA
@pytest.mark.parametrize("kind", ["missing", "file", "unrelated folder"])
def test_wrong_dlmlab_data_is_a_one_line_error(tmp_path, monkeypatch, capsys, kind):
    from dlmlab.data import DataConfig, load_corpus
    from dlmlab.data.paths import DataNotFound, data_root

    bad = tmp_path / "nodata"
    if kind == "file":
        bad.write_text("x")
    elif kind == "unrelated folder":
        bad.mkdir()
    monkeypatch.setenv("DLMLAB_DATA", str(bad))
    with pytest.raises(DataNotFound) as e:
        data_root()  # not a silent fall-back to ../shared/data
    msg = str(e.value)
    assert f"DLMLAB_DATA={bad}" in msg and "\n" not in msg
    with pytest.raises(DataNotFound, match="DLMLAB_DATA="):
        load_corpus(DataConfig(source="tinyshakespeare"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {d_model: 16, n_layers: 1, n_heads: 2, max_seq_len: 16}\n"
                   "data: {source: tinyshakespeare, seq_len: 12}\ntrain: {steps: 1, batch_size: 2, progress: false}\n")
    assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "DLMLAB_DATA" in err and str(bad) in err


def test_a_good_dlmlab_data_is_used(tmp_path, monkeypatch):
    from dlmlab.data.paths import data_root, resolve_text

    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_text("x")
    monkeypatch.setenv("DLMLAB_DATA", str(tmp_path))
    assert data_root() == tmp_path and resolve_text("tinyshakespeare") == tmp_path / "tinyshakespeare" / "input.txt"


# ------------------------------------------------------------------------- item 6: eval a Hugging Face folder
def _tiny_gpt2_folder(path):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=12, n_positions=32, bos_token_id=None, eos_token_id=None,
    )).eval().save_pretrained(path)
    vocab = {w: i for i, w in enumerate("the cat sat on mat. dog ran to it. [UNK]".split())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(path)


def test_eval_works_on_a_hugging_face_folder(tmp_path, capsys):
    import math

    import dlmlab
    from dlmlab.objectives import ar_loss

    hf = tmp_path / "gpt2"
    _tiny_gpt2_folder(hf)
    src = _corpus(tmp_path)
    assert main(["eval", str(hf), "--source", str(src), "--seq-len", "8", "--batch-size", "2", "--batches", "2"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["format"], res["seq_len"]) == ("gpt2", 8) and math.isclose(res["ppl"], math.exp(res["nll"]))
    # the same number by hand: windows of 9 tokens from the last 10% of the text
    run = dlmlab.load(hf)
    ids = torch.tensor(run.tokenizer.encode(src.read_text()))
    val = ids[int(len(ids) * 0.9):]
    x = val[: 4 * 9].view(4, 9)
    with torch.no_grad():
        want = sum(ar_loss(run.model, xb)[0].item() for xb in x.split(2)) / 2
    assert res["nll"] == pytest.approx(want, rel=1e-6)
    # a window longer than the model's positions is a one-line error
    assert main(["eval", str(hf), "--source", str(src), "--seq-len", "40"]) == 2
    assert "positions" in capsys.readouterr().err


# ------------------------------------------------------------------------- item 7: `dlmlab train` == build_model
SECTIONS = {  # model sections that leave fields to the defaults (and, but for the transformer, the width)
    "transformer": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 16},  # d_mlp left out
    "mamba": {"family": "mamba", "d_model": 16, "n_layers": 1, "d_state": 4, "scan": "chunked"},
    "mamba2": {"family": "mamba2", "d_model": 16, "n_layers": 1, "d_state": 8, "headdim": 8},
    "gru": {"family": "gru", "d_model": 16, "n_layers": 1},
}


@pytest.mark.parametrize("objective", ["ar", "mdlm"])
@pytest.mark.parametrize("family", list(SECTIONS))
def test_train_builds_the_model_build_model_builds(tmp_path, monkeypatch, family, objective):
    import dlmlab
    from dlmlab.models.factory import build_model, count_params
    from dlmlab.training import lm

    if objective == "mdlm" and family == "transformer":
        section = dict(SECTIONS[family], attn_mask="bidirectional")
    else:
        section = SECTIONS[family]
    seed = 3
    inits = []
    real_train = lm.train

    def spy(model, *a, **kw):  # the freshly built model `dlmlab train` is about to train
        inits.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return real_train(model, *a, **kw)

    monkeypatch.setattr(lm, "train", spy)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"objective: {objective}\nmodel: {json.dumps(section)}\n"
                   f"data: {{source: {_corpus(tmp_path)}, seq_len: 12}}\n"
                   f"train: {{steps: 1, batch_size: 2, seed: {seed}, progress: false}}\neval_batches: 1\n")
    out = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out)]) == 0
    run = dlmlab.load(out)
    V = run.tokenizer.vocab_size + (1 if objective == "mdlm" else 0)
    fields = {k: v for k, v in section.items() if k != "family"}
    torch.manual_seed(seed)
    ref = build_model(family, vocab_size=V, **fields)
    assert count_params(run.model) == count_params(ref)
    assert {k: v.shape for k, v in run.model.state_dict().items()} == {k: v.shape for k, v in ref.state_dict().items()}
    assert run.model.cfg == ref.cfg  # every field, the matched width included
    (init,) = inits
    assert init.keys() == ref.state_dict().keys()
    assert all(torch.equal(init[k], v) for k, v in ref.state_dict().items())  # same seed: same weights
    # the run records the resolved config, so it resumes and loads as the same model
    saved = json.loads((out / "config.json").read_text())["model"]
    assert {k: saved[k] for k in fields} == fields and saved.get("vocab_size", 0) == 0


def test_section_config_is_model_config():
    from dlmlab.models.factory import model_config, section_config

    for family, section in SECTIONS.items():
        fields = {k: v for k, v in section.items() if k != "family"}
        assert section_config(section, 30) == model_config(family, vocab_size=30, **fields)
    # a width given in the section is kept, and nothing is matched
    assert section_config({"family": "gru", "d_model": 16, "hidden_size": 7}, 30).hidden_size == 7
    assert section_config({"family": "lstm", "cell": "lstm"}, 30).cell == "lstm"
