"""The trajectory page shows the denoising loop (issue 29, part 5): a positions x steps heat map of entropy with the
top-k alternatives on hover, the logit lens per layer for a chosen position, whitespace tokens visible, a readable
steps list; checked in headless Chromium."""

from __future__ import annotations

import json
import re

import pytest
import torch

from browser_util import browser, console_errors  # noqa: F401
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.sampling import DecodeConfig
from dlmlab.sampling.lens import lens_points, trajectory_lens
from dlmlab.sampling.trajectory_cache import generate_with_cache
from dlmlab.sampling.trajectory_html import trajectory_data, trajectory_page

V, MASK, P, G = 30, 29, 4, 10
TEXT = {0: " ", 1: "\n", 2: "\t"}  # whitespace ids


def _text(i: int) -> str:
    return "[M]" if i == MASK else TEXT.get(i, chr(ord("a") + i % 26))


@pytest.fixture(scope="module")
def decoded():
    torch.manual_seed(0)
    m = Transformer(TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64,
                                      attn_mask="bidirectional", positions="rope")).eval()
    with torch.no_grad():  # make whitespace ids likely so that some are committed
        m.unembed.weight[:3] *= 0
        m.unembed.weight[:3] += m.unembed.weight[3:].mean(0)
    prompt = torch.tensor([[3, 0, 4, 1], [5, 2, 6, 0]])
    traj = generate_with_cache(m, prompt, G, DecodeConfig(steps=5), torch.Generator().manual_seed(0), mask_id=MASK,
                               names_filter=lens_points(m))
    return traj, trajectory_lens(traj, m)


def test_page_data_carries_entropy_top_k_and_lens(decoded):
    traj, lens = decoded
    data = trajectory_data(traj.records, traj.canvas, P, MASK, _text, lens)
    st = data["samples"][0]["steps"][0]
    rec = traj.records[st["step"]]
    assert len(st["entropy"]) == P + G and st["entropy"][:P] == [None] * P
    assert st["entropy"][P] == pytest.approx(float(rec.entropy[0, P]), abs=1e-4)
    assert [a[0] for a in st["top"][str(P)]] == rec.top_ids[0, P].tolist()
    assert data["lens"]["labels"] == lens.labels
    assert len(data["lens"]["samples"][0][str(st["step"])]) == 3  # depths


def test_page_in_chromium_heat_map_hover_lens_whitespace_and_steps(decoded, tmp_path, browser):  # noqa: F811
    traj, lens = decoded
    page = tmp_path / "t.html"
    page.write_text(trajectory_page(traj.records, traj.canvas, P, MASK, _text, lens=lens))
    tab = browser.new_page(viewport={"width": 900, "height": 900})
    errors = console_errors(tab)
    tab.goto(page.as_uri(), wait_until="load", timeout=30_000)
    n_steps = tab.locator("#steps li").count()
    # heat map: one row per position, one column per step of the sample; cells where the position was a candidate
    assert tab.locator("#heat tr").count() == 1 + P + G
    cells = tab.locator("#heat td.cell")
    expected = sum(1 for r in traj.records if r.committed[0].any() for p in range(P + G)
                   if not torch.isnan(r.entropy[0, p]))
    assert cells.count() == expected > 0
    title = cells.first.get_attribute("title")
    assert "entropy" in title and "top:" in title
    assert tab.locator("#heat td.commit").count() == G  # every generated position committed once
    # whitespace is visible in the canvas: the prompt's space, newline and tab
    spans = tab.eval_on_selector_all("#canvas span", "ss => ss.map(s => [s.textContent, s.className])")
    assert spans[1][0] == "\u2423" and "ws" in spans[1][1]
    assert spans[3][0].startswith("\u21b5")
    # lens: choose a position by clicking a heat-map cell -> one row per depth, at that cell's step
    cell = tab.locator(f'#heat td.cell[data-pos="{P + 1}"]').first
    col = int(cell.get_attribute("data-col"))
    cell.click()
    assert int(tab.eval_on_selector("#slider", "s => s.value")) == col
    assert tab.locator("#lens tbody tr").count() == len(lens.labels)
    assert "position 5" in tab.locator("#lens-note").inner_text()
    first_row = tab.locator("#lens tbody tr").first.inner_text()
    assert "blocks.0.resid_pre" in first_row
    # a canvas click chooses too
    tab.locator('#canvas span[data-pos="6"]').click()
    assert "position 6" in tab.locator("#lens-note").inner_text()
    # the steps list is readable: no two entries overlap, each fully visible in its box
    boxes = tab.eval_on_selector_all("#steps li", "ls => ls.map(l => { const r = l.getBoundingClientRect(); "
                                     "return [r.left, r.top, r.right, r.bottom]; })")
    assert len(boxes) == n_steps
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap_x = min(a[2], b[2]) - max(a[0], b[0])
            overlap_y = min(a[3], b[3]) - max(a[1], b[1])
            assert overlap_x <= 0.5 or overlap_y <= 0.5, (a, b)
    assert errors == []
    tab.close()


def test_page_without_lens_says_so(decoded, tmp_path, browser):  # noqa: F811
    traj, _ = decoded
    page = tmp_path / "t.html"
    text = trajectory_page(traj.records, traj.canvas, P, MASK, _text)
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S).group(1))
    assert data["lens"] is None
    page.write_text(text)
    tab = browser.new_page()
    errors = console_errors(tab)
    tab.goto(page.as_uri(), wait_until="load", timeout=30_000)
    assert "no logit lens" in tab.locator("#lens-note").inner_text()
    assert errors == []
    tab.close()
