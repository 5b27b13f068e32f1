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


# -- issue 37: the colour scale, step labels, whitespace in one-line places, the lens over steps --------------

def _helpers() -> str:
    from dlmlab.sampling.trajectory_html import PAGE

    start = PAGE.index("// pure helpers")
    return PAGE[start:PAGE.index("// end of the pure helpers")]


def test_page_helpers_in_node_keep_newlines_on_one_line_and_spread_the_colour_scale(tmp_path):
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found")
    script = _helpers() + """
const assert = require("assert");
assert.strictEqual(inline("a\\nb"), "a\\u21b5b");                  // no raw newline left, no "\\n" text either
assert.strictEqual(quote("\\n"), "\\u201c\\u21b5\\u201d");
assert.strictEqual(show("\\n"), "\\u21b5\\n");                      // the canvas still breaks the line
const Q = [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 2.0, 5.0];
assert.strictEqual(rank(0.3, Q), 0.3);
assert.strictEqual(rank(3.5, Q), 0.95);
assert.strictEqual(rank(-1, Q), 0); assert.strictEqual(rank(9, Q), 1);
assert.notStrictEqual(colour(0), colour(0.5)); assert.notStrictEqual(colour(0.5), colour(1));
console.log("ok");
"""
    f = tmp_path / "helpers.js"
    f.write_text(script)
    out = subprocess.run([node, str(f)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_page_data_has_one_entropy_scale_for_all_samples_and_decided_at(decoded):
    traj, lens = decoded
    data = trajectory_data(traj.records, traj.canvas, P, MASK, _text, lens)
    ent = torch.stack([r.entropy for r in traj.records]).flatten()
    ent = ent[torch.isfinite(ent)]
    want = torch.quantile(ent.double(), torch.linspace(0, 1, 11, dtype=torch.float64))
    assert data["entropy_scale"] == pytest.approx(want.tolist(), abs=1e-4)
    assert data["lens"]["decided_at"] == [lens.decided_at(traj)[:, b].tolist() for b in range(2)]
    page = trajectory_page(traj.records, traj.canvas, P, MASK, _text, lens=lens)
    assert 'id="legend"' in page and "th.step{writing-mode:vertical-rl" in page and 'id="lens-steps"' in page


def test_page_in_chromium_step_labels_legend_and_lens_over_steps(tmp_path, browser):  # noqa: F811
    torch.manual_seed(0)
    m = Transformer(TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64,
                                      attn_mask="bidirectional", positions="rope")).eval()
    traj = generate_with_cache(m, torch.tensor([[3, 0, 4, 1]]), 14, DecodeConfig(steps=14),
                               torch.Generator().manual_seed(0), mask_id=MASK, names_filter=lens_points(m))
    lens = trajectory_lens(traj, m)
    page = tmp_path / "t.html"
    page.write_text(trajectory_page(traj.records, traj.canvas, P, MASK, _text, lens=lens))
    tab = browser.new_page(viewport={"width": 900, "height": 900})
    errors = console_errors(tab)
    tab.goto(page.as_uri(), wait_until="load", timeout=30_000)
    # two-digit step labels: each label's text inside its own column, no two overlapping
    rects = tab.eval_on_selector_all("#heat th.step", "ths => ths.map(th => { const r = document.createRange(); "
                                     "r.selectNodeContents(th); const a = r.getBoundingClientRect(), "
                                     "b = th.getBoundingClientRect(); return [a.left, a.right, b.left, b.right]; })")
    assert len(rects) == 14
    for a, b in zip(rects, rects[1:]):
        assert a[1] <= b[0] + 0.5
    assert all(r[0] >= r[2] - 0.5 and r[1] <= r[3] + 0.5 for r in rects)
    assert len(tab.locator("#legend-ticks span").all_inner_texts()) == 3
    # tooltips carry no literal "\n" text after a newline symbol
    assert all("\u21b5\\n" not in (t or "") for t in tab.eval_on_selector_all("#heat td.cell", "c => c.map(x => x.title)"))
    tab.locator(f'#heat td.cell[data-pos="{P + 2}"]').first.click()
    assert tab.locator("#lens-steps tbody tr").count() == len(lens.labels)
    dec = lens.decided_at(traj)[:, 0, P + 2].tolist()
    assert [int(t) for t in tab.eval_on_selector_all("#lens-steps tbody tr", "rs => rs.map(r => r.cells[1].textContent)")] == dec
    assert errors == []
    tab.close()
