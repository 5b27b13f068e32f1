"""A denoising trajectory written as a self-contained HTML page (`dlmlab sample --html`): the steps, the logit lens
per layer, refused for an AR run, and checked in Chromium."""

from __future__ import annotations

import json
import re

import pytest
import torch

from browser_util import browser, console_errors  # noqa: F401
from dlmlab.cli import sample_cmd
from dlmlab.cli.main import main
from dlmlab.rundir.load import load
from dlmlab.sampling import DecodeConfig, decode
from run_util import write_run_cfg


@pytest.fixture(scope="module")
def mdlm_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("mdlm")
    assert main(["train", str(write_run_cfg(d, "mdlm", steps=3)), "--out", str(d / "run")]) == 0
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
    assert "kv_reuse: none (exact)" in text
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
    assert main(["train", str(write_run_cfg(tmp_path, "ar", steps=1)), "--out", str(run)]) == 0
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
