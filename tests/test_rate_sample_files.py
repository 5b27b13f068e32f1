"""`dlmlab rate` on the files `dlmlab sample --out` writes: methods named by the setting that differs, pairs,
the database beside the first file."""

from __future__ import annotations

import json

from dlmlab.cli.main import main
from run_util import write_corpus


def _sample_rows(prompt_texts, config):
    """Lines as `dlmlab sample --out` writes them (cli/sample_cmd.py)."""
    return [{"index": i, "prompt": p, "text": t, "full": p + t, "filled_ids": [1, 2], "steps": 4, "forwards": 4,
             "kv_reuse": "none", "exactness": "exact", "config": config} for i, (p, t) in enumerate(prompt_texts)]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rate_accepts_sample_out_files(tmp_path, capsys):
    from dlmlab.rating import all_pairs, load_samples
    from dlmlab.rating.server import RatingApp

    base = {"steps": 64, "order": "confidence", "threshold": None, "kv_reuse": "none"}
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
                   f"attn_mask: bidirectional}}\ndata: {{source: {write_corpus(tmp_path)}, seq_len: 12}}\n"
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
