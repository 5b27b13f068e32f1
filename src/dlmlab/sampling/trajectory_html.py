"""A denoising trajectory as a self-contained HTML page: step by step, what was committed and how sure.

:func:`trajectory_page` turns the :class:`~dlmlab.sampling.trajectory.StepRecord` list of one decode call
(``decode(..., record=True)``) into one HTML file with no external resources: a step slider (and a list
of the steps), the canvas after the chosen step with the positions committed at that step highlighted
and their confidence, earlier commits plain and still-masked positions as a placeholder (``[M]``), the
text so far, and a table of the step's commits.  Every sample of the batch has its own trajectory
(a select box picks it); a sample's steps are the decoder steps at which it committed something.

``dlmlab sample RUN --html PAGE.html`` writes one.
"""

from __future__ import annotations

import html
import json
import math
from typing import Callable, Sequence

import torch

from dlmlab.sampling.trajectory import StepRecord

PLACEHOLDER = "[M]"


def trajectory_data(records: Sequence[StepRecord], canvas: torch.Tensor, prompt_len: int, mask_id: int,
                    token_text: Callable[[int], str]) -> dict:
    """The page's data: records of one decode call, its input ``canvas`` [B,N] (mask ids where filled in).

    -> ``{"prompt_len", "placeholder", "tokens": {id: text}, "samples": [{"canvas": [N ids, -1 = masked],
    "steps": [{"step", "block", "commits": [[position, id, confidence], ...]}, ...]}, ...]}`` with every
    step of a sample committing at least one position; ``token_text(id)`` shows one token.
    """
    if canvas.dim() != 2:
        raise ValueError(f"canvas must be [batch, positions], got shape {tuple(canvas.shape)}")
    B, N = canvas.shape
    ids: set[int] = set()
    samples = []
    for b in range(B):
        start = [-1 if t == mask_id else t for t in canvas[b].tolist()]
        ids.update(t for t in start if t >= 0)
        steps = []
        for rec in records:
            pos = rec.committed[b].nonzero().squeeze(1).tolist()
            if not pos:
                continue
            toks = rec.tokens[b, pos].tolist()
            conf = rec.confidence[b, pos].tolist()
            ids.update(toks)
            steps.append({"step": rec.step, "block": rec.block,
                          "commits": [[p, t, c if math.isfinite(c) else None] for p, t, c in zip(pos, toks, conf)]})
        samples.append({"canvas": start, "steps": steps})
    cache = next((r.cache for r in records if r.cache is not None), None)
    exact = next((r.exact for r in records if r.exact is not None), None)
    return {"prompt_len": prompt_len, "placeholder": PLACEHOLDER, "cache": cache, "exact": exact,
            "tokens": {str(i): token_text(i) for i in sorted(ids)}, "samples": samples}


def trajectory_page(records: Sequence[StepRecord], canvas: torch.Tensor, prompt_len: int, mask_id: int,
                    token_text: Callable[[int], str], title: str = "denoising trajectory",
                    notes: Sequence[str] = ()) -> str:
    """A self-contained HTML page (one string) showing the trajectory (see :func:`trajectory_data`);
    ``notes``: lines shown under the title (e.g. the model and the decoder settings)."""
    data = trajectory_data(records, canvas, prompt_len, mask_id, token_text)
    payload = json.dumps(data, ensure_ascii=True, allow_nan=False).replace("</", "<\\/")
    label = ("cache: none" if data["cache"] in (None, "none") else f"cache: {data['cache']}") + (
        "" if data["exact"] is None else (" (exact)" if data["exact"] else " (approximate: logits differ from "
                                          "recomputing every position)"))
    lines = "".join(f"<p class=\"note\">{html.escape(n)}</p>" for n in [*notes, label])
    return PAGE.replace("__TITLE__", html.escape(title)).replace("__NOTES__", lines).replace("__DATA__", payload)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:70em;color:#222}
.note{margin:.2em 0;color:#555}
#controls{margin:1em 0;display:flex;gap:.6em;align-items:center;flex-wrap:wrap}
#slider{width:24em}
#canvas{font-family:ui-monospace,monospace;line-height:2.1;border:1px solid #ccc;padding:.6em;white-space:pre-wrap}
#canvas span{padding:.1em .15em;margin:0 1px;border-radius:3px}
.prompt{background:#eee;color:#555}.done{background:#e6f0ff}.masked{color:#aaa;background:#fafafa}
.now{background:#ffd76a;outline:1px solid #c90}
#text{white-space:pre-wrap;font-family:ui-monospace,monospace;border-left:3px solid #ccc;padding-left:.6em}
#steps{columns:4;font-size:.9em}#steps li{cursor:pointer}#steps li.cur{font-weight:bold;color:#05a}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.15em .5em;text-align:left}
</style></head><body>
<h1>__TITLE__</h1>
__NOTES__
<div id="controls">
<label id="sample-box">sample <select id="sample"></select></label>
<button id="prev" type="button">&larr;</button>
<input id="slider" type="range" min="0" max="0" value="0">
<button id="next" type="button">&rarr;</button>
<span id="step-label"></span>
</div>
<h2>Canvas after this step</h2>
<p class="note">highlighted: committed at this step (hover: confidence); blue: committed earlier; grey: prompt;
__PH__: still masked</p>
<div id="canvas"></div>
<h2>Text so far</h2>
<div id="text"></div>
<h2>Committed at this step</h2>
<table id="commits"><thead><tr><th>position</th><th>token</th><th>confidence</th></tr></thead><tbody></tbody></table>
<h2>Steps</h2>
<ol id="steps" start="0"></ol>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
let cur = 0, k = 0;
const tokText = (t) => (t < 0 ? D.placeholder : (D.tokens[String(t)] ?? "<" + t + ">"));
const show = (s) => s.replace(/\\n/g, "\\u21b5\\n");
function sample() { return D.samples[cur]; }
function render() {
  const S = sample(), n = S.steps.length;
  k = Math.max(0, Math.min(k, n - 1));
  $("slider").max = String(Math.max(0, n - 1));
  $("slider").value = String(k);
  const canvas = S.canvas.slice(), now = new Map();
  for (let j = 0; j <= k && j < n; j++) {
    for (const [p, t, c] of S.steps[j].commits) { canvas[p] = t; if (j === k) now.set(p, c); }
  }
  const st = S.steps[k];
  $("step-label").textContent = n ? "step " + (k + 1) + " of " + n + " (decoder step " + st.step +
    ", block " + st.block + ", " + st.commits.length + " committed)" : "no steps";
  const box = $("canvas");
  box.replaceChildren();
  canvas.forEach((t, p) => {
    const el = document.createElement("span");
    el.textContent = show(tokText(t));
    el.dataset.pos = String(p);
    if (p < D.prompt_len && S.canvas[p] >= 0) el.className = "prompt";
    else if (now.has(p)) {
      el.className = "now";
      const c = now.get(p);
      el.title = "position " + p + ", confidence " + (c === null ? "n/a" : c.toFixed(3));
    } else if (t < 0) el.className = "masked";
    else if (S.canvas[p] < 0) el.className = "done";
    box.appendChild(el);
  });
  $("text").textContent = canvas.map(tokText).join("");
  const body = $("commits").tBodies[0];
  body.replaceChildren();
  if (n) for (const [p, t, c] of st.commits.slice().sort((a, b) => a[0] - b[0])) {
    const tr = body.insertRow();
    tr.dataset.pos = String(p);
    tr.insertCell().textContent = String(p);
    tr.insertCell().textContent = show(tokText(t));
    tr.insertCell().textContent = c === null ? "n/a" : c.toFixed(3);
  }
  const ol = $("steps");
  [...ol.children].forEach((li, j) => li.classList.toggle("cur", j === k));
}
function fillSteps() {
  const ol = $("steps");
  ol.replaceChildren();
  sample().steps.forEach((st, j) => {
    const li = document.createElement("li");
    const cs = st.commits.map((c) => c[2]).filter((c) => c !== null);
    const mean = cs.length ? cs.reduce((a, b) => a + b, 0) / cs.length : null;
    li.textContent = "decoder step " + st.step + ": " + st.commits.length + " committed" +
      (mean === null ? "" : ", mean confidence " + mean.toFixed(3));
    li.addEventListener("click", () => { k = j; render(); });
    ol.appendChild(li);
  });
}
D.samples.forEach((_, i) => { const o = document.createElement("option"); o.value = String(i);
  o.textContent = String(i); $("sample").appendChild(o); });
if (D.samples.length < 2) $("sample-box").style.display = "none";
$("sample").addEventListener("change", (e) => { cur = Number(e.target.value); k = 0; fillSteps(); render(); });
$("slider").addEventListener("input", (e) => { k = Number(e.target.value); render(); });
$("prev").addEventListener("click", () => { k -= 1; render(); });
$("next").addEventListener("click", () => { k += 1; render(); });
fillSteps();
render();
</script>
</body></html>
""".replace("__PH__", html.escape(PLACEHOLDER))
