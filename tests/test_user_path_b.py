"""A new user's path end to end (issue 23, items 2, 5 and 10): one exact cache default in Python and the CLI,
trajectory records labelled with their cache; `dlmlab sample` on AR runs of every family, `load(run, step=N)`,
a finished run extended with `dlmlab train --steps M`, checkpoint pruning that says what it keeps; and a
denoising trajectory written as a self-contained HTML page (`dlmlab sample --html`), checked in Chromium."""

from __future__ import annotations

import argparse
import json
import re

import pytest
import torch

from browser_util import browser, console_errors  # noqa: F401
from dlmlab.cli import sample_cmd
from dlmlab.cli.main import main
from dlmlab.errors import UserError
from dlmlab.loading import load
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.sampling import DecodeConfig, decode, generate
from dlmlab.sampling.ar import sample_ar

V = 30
MASK = V - 1
CORPUS = "The cat sat on the mat. The dog ran to it. " * 30


def _write_cfg(tmp_path, objective="ar", family="transformer", steps=3, train_extra=""):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    model = "{family: %s, d_model: 16, n_layers: 1%s}" % (
        family, ", n_heads: 2, max_seq_len: 32" + (", attn_mask: bidirectional" if objective == "mdlm" else "")
        if family == "transformer" else "")
    cfg = tmp_path / f"{family}_{objective}.yaml"
    cfg.write_text(f"objective: {objective}\nmodel: {model}\ndata: {{source: {corpus}, seq_len: 16}}\n"
                   f"train: {{steps: {steps}, batch_size: 4, progress: false{train_extra}}}\neval_batches: 1\n")
    return cfg


def _bidirectional(seed=0):
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64,
                            positions="rope", attn_mask="bidirectional")
    return Transformer(cfg).double().eval()


def _prompt(B=2, P=4):
    return torch.randint(0, MASK, (B, P), generator=torch.Generator().manual_seed(1))


# ---- item 2: one default, exact; approximate only when asked for, and labelled in every record ----------------


def test_python_and_cli_default_to_the_exact_cache():
    assert DecodeConfig().cache == "none"
    p = argparse.ArgumentParser()
    sample_cmd.add_arguments(p)
    assert p.parse_args(["RUN"]).cache == DecodeConfig().cache
    # the default on a fully bidirectional model (where prompt / prefix / dual caches are approximate) is exact
    res = generate(_bidirectional(), _prompt(), 6, DecodeConfig(steps=3), torch.Generator().manual_seed(0),
                   mask_id=MASK)
    assert (res.cache, res.exactness) == ("none", "exact")


def test_every_trajectory_record_names_its_cache_and_whether_it_is_exact():
    m = _bidirectional()
    for cfg, cache, exact in [(DecodeConfig(steps=3), "none", True),
                              (DecodeConfig(steps=4, cache="prefix", block_len=3), "prefix", False),
                              (DecodeConfig(steps=4, cache="dual", block_len=3, attention="block_causal"), "dual", True)]:
        seen = []
        res = generate(m, _prompt(), 6, cfg, torch.Generator().manual_seed(0), mask_id=MASK, record=True,
                       callback=seen.append)
        assert len(res.trajectory) == res.steps > 0 and seen == res.trajectory
        assert {(r.cache, r.exact) for r in res.trajectory} == {(cache, exact)}
        assert res.exactness == ("exact" if exact else "approximate")


# ---- item 5: AR runs of every family, load(step=N), extending a run, pruning that says what it keeps -------------


@pytest.mark.parametrize("family", ["transformer", "mamba", "mamba2", "lstm", "gru"])
def test_dlmlab_sample_on_an_ar_run_of_every_family(tmp_path, capsys, family):
    run = tmp_path / "run"
    assert main(["train", str(_write_cfg(tmp_path, "ar", family, steps=2)), "--out", str(run)]) == 0
    capsys.readouterr()
    args = ["sample", str(run), "--prompt", "The ", "--gen-len", "6", "--num-samples", "3", "--batch-size", "2",
            "--format", "jsonl", "--no-progress", "--temperature", "0", "--seed", "3"]
    assert main(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert all(r["full"].startswith("The ") and len(r["generated_ids"]) == 6 and r["objective"] == "ar"
               and r["family"] == family for r in rows)
    assert all(r["kv_cache"] is (family == "transformer") for r in rows)  # KV-cached where the model takes a cache
    # the same tokens as sample_ar without a cache (greedy, so float rounding of the cached path cannot flip a draw)
    loaded = load(run)
    ids = loaded.tokenizer.encode("The ")
    ref = sample_ar(loaded.model, torch.tensor([ids]), 6, 0.0, 1.0, torch.Generator().manual_seed(3), use_cache=False)
    assert rows[0]["generated_ids"] == ref[0, len(ids):].tolist()


def test_load_picks_checkpoint_n_of_a_run(tmp_path, capsys):
    run = tmp_path / "run"
    cfg = _write_cfg(tmp_path, "ar", steps=3, train_extra=", ckpt_every: 1, keep_checkpoints: 0")
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
    cfg = _write_cfg(tmp_path, "ar", steps=3, train_extra=", schedule: constant, log_every: 1")
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
    from dlmlab.training.checkpoint import list_checkpoints, save_checkpoint

    m = torch.nn.Linear(2, 2)
    for step in (1, 2):
        save_checkpoint(tmp_path, step, m, None, {}, keep=2)
    assert capsys.readouterr().err == ""  # nothing removed, nothing said
    save_checkpoint(tmp_path, 3, m, None, {}, keep=2)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert re.search(r"kept step_0000002, step_0000003; removed step_0000001 \(train.keep_checkpoints = 2", err)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]


# ---- item 10: the denoising trajectory as a page -----------------------------------------------------------------


@pytest.fixture(scope="module")
def mdlm_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("mdlm")
    assert main(["train", str(_write_cfg(d, "mdlm", steps=3)), "--out", str(d / "run")]) == 0
    return d / "run"


def _page_data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def _expected(run, gen_len, steps, seed, n=1):
    """The trajectory `dlmlab sample` decodes: (records, prompt length)."""
    den, tok, _, trained = sample_cmd._load(str(run), load(str(run)))
    ids = tok.encode("The ")
    x = torch.tensor([ids + [den.mask_id] * gen_len] * n)
    cfg = DecodeConfig(steps=steps, noise=sample_cmd.noise_schedule(None, trained))
    res = decode(den, x, len(ids), cfg, torch.Generator().manual_seed(seed), record=True)
    return res, len(ids)


@pytest.fixture(scope="module")
def page(mdlm_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "t.html"
    assert main(["sample", str(mdlm_run), "--prompt", "The ", "--gen-len", "10", "--steps", "5", "--seed", "2",
                 "--num-samples", "2", "--html", str(out), "--no-progress", "--format", "jsonl"]) == 0
    return out


def test_html_page_holds_the_trajectory_step_by_step(mdlm_run, page):
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r'(src|href)="(https?:)?//', text) and "url(" not in text and "@import" not in text
    assert "cache: none (exact)" in text
    data = _page_data(text)
    res, P = _expected(mdlm_run, 10, 5, 2, n=2)
    assert data["prompt_len"] == P and len(data["samples"]) == 2
    for b, sample in enumerate(data["samples"]):
        assert len(sample["steps"]) == res.steps == 5
        for st, rec in zip(sample["steps"], res.trajectory):
            pos = rec.committed[b].nonzero().squeeze(1).tolist()
            assert st["step"] == rec.step and [c[0] for c in st["commits"]] == pos
            assert [c[1] for c in st["commits"]] == rec.tokens[b, pos].tolist()
            assert [c[2] for c in st["commits"]] == pytest.approx(rec.confidence[b, pos].tolist())
        assert sorted(c[0] for st in sample["steps"] for c in st["commits"]) == list(range(P, P + 10))
        assert sample["canvas"][P:] == [-1] * 10


def test_html_page_carries_the_logit_lens_per_layer(mdlm_run, page):
    from dlmlab.sampling.lens import lens_points

    data = _page_data(page.read_text())
    den, *_ = sample_cmd._load(str(mdlm_run), load(str(mdlm_run)))
    lens = data["lens"]
    assert lens is not None and len(lens["labels"]) == len(lens_points(den.hooked))
    res, P = _expected(mdlm_run, 10, 5, 2, n=2)
    assert len(lens["samples"]) == 2 and len(lens["samples"][0]) == res.steps
    # the cached decode commits exactly what a plain decode commits
    for b, sample in enumerate(data["samples"]):
        last = [c for st in sample["steps"] for c in st["commits"]]
        assert sorted((c[0], c[1]) for c in last) == sorted(
            (p_, int(res.tokens[b, p_])) for p_ in range(P, P + 10))


def test_html_refused_for_an_ar_run(tmp_path, capsys):
    run = tmp_path / "ar"
    assert main(["train", str(_write_cfg(tmp_path, "ar", steps=1)), "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["sample", str(run), "--prompt", "The ", "--html", str(tmp_path / "p.html"), "--no-progress"]) == 2
    assert "--html" in capsys.readouterr().err


def test_html_page_in_chromium_moves_between_steps(mdlm_run, page, browser):  # noqa: F811
    res, P = _expected(mdlm_run, 10, 5, 2, n=2)
    tab = browser.new_page()
    errors = console_errors(tab)
    requests = []
    tab.on("request", lambda r: requests.append(r.url))
    tab.goto(page.as_uri(), wait_until="load", timeout=30_000)
    assert tab.locator("#steps li").count() == res.steps == 5
    assert tab.locator("#canvas span").count() == P + 10

    def committed_shown():
        return [int(p) for p in tab.eval_on_selector_all("#commits tbody tr", "rs => rs.map(r => r.dataset.pos)")]

    def expected(k, b=0):
        return res.trajectory[k].committed[b].nonzero().squeeze(1).tolist()

    assert committed_shown() == expected(0)
    tab.eval_on_selector("#slider", "(s) => { s.value = '3'; s.dispatchEvent(new Event('input')); }")
    assert committed_shown() == expected(3)
    now = [int(p) for p in tab.eval_on_selector_all("#canvas span.now", "ss => ss.map(s => s.dataset.pos)")]
    assert now == expected(3)
    masked = tab.locator("#canvas span.masked").count()
    assert masked == sum(int(r.committed[0].sum()) for r in res.trajectory[4:])  # still masked after step 3
    assert "[M]" in tab.locator("#text").inner_text()
    tab.click("#next")
    assert committed_shown() == expected(4) and tab.locator("#canvas span.masked").count() == 0
    tab.locator("#steps li").nth(1).click()
    assert committed_shown() == expected(1)
    tab.select_option("#sample", "1")
    assert committed_shown() == expected(0, b=1)
    assert errors == [] and all(u.startswith("file:") for u in requests)
    tab.close()
