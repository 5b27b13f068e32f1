"""A denoising trajectory as a self-contained HTML page: step by step, what was committed and how sure.

:func:`trajectory_page` turns the :class:`~dlmlab.sampling.trajectory.StepRecord` list of one decode call
(``decode(..., record=True)``) into one HTML file with no external resources: a step slider (and a list
of the steps), the canvas after the chosen step with the positions committed at that step highlighted
and their confidence, earlier commits plain and still-masked positions as a placeholder (``[M]``), the
text so far, and a table of the step's commits; a positions x steps heat map of the candidates' entropy
(hover: the step's top-k alternatives at that position; click: go to that step and choose the position),
and, when a :class:`~dlmlab.sampling.lens.TrajectoryLens` is given, the logit lens per layer at the chosen
position and step.  Whitespace tokens are shown as visible symbols (space, tab, newline).  Every sample of
the batch has its own trajectory (a select box picks it); a sample's steps are the decoder steps at which it
committed something.

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
SCALE_STEPS = 10  # the entropy colour scale's quantile steps


def _finite(x: float) -> float | None:
    return round(x, 4) if math.isfinite(x) else None


def trajectory_data(records: Sequence[StepRecord], canvas: torch.Tensor, prompt_len: int, mask_id: int,
                    token_text: Callable[[int], str], lens=None, lens_k: int = 3) -> dict:
    """The page's data: records of one decode call, its input ``canvas`` [B,N] (mask ids where filled in).

    -> ``{"prompt_len", "placeholder", "tokens": {id: text}, "samples": [{"canvas": [N ids, -1 = masked],
    "steps": [{"step", "block", "commits": [[position, id, confidence], ...], "entropy": [N, null off
    candidates], "top": {position: [[id, probability], ...]}}, ...]}, ...], "lens": null | {"labels": [depth
    names], "samples": [{step: [depth][position] -> [[id, probability], ...]}]}}`` with every step of a sample
    committing at least one position; ``token_text(id)`` shows one token; ``lens``: a
    :class:`~dlmlab.sampling.lens.TrajectoryLens` of the same decode (its ``lens_k`` best tokens are shown).
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
            top = {}
            if rec.top_ids is not None:
                for p in (rec.top_ids[b, :, 0] >= 0).nonzero().squeeze(1).tolist():
                    alt = [[int(i), _finite(float(q))] for i, q in zip(rec.top_ids[b, p].tolist(),
                                                                        rec.top_probs[b, p].tolist()) if i >= 0]
                    ids.update(a[0] for a in alt)
                    top[str(p)] = alt
            steps.append({"step": rec.step, "block": rec.block,
                          "commits": [[p, t, c if math.isfinite(c) else None] for p, t, c in zip(pos, toks, conf)],
                          "entropy": [_finite(float(h)) for h in rec.entropy[b].tolist()], "top": top})
        samples.append({"canvas": start, "steps": steps})
    lens_data = None
    if lens is not None:
        decided = lens.decided_at(_Replay(records, canvas, mask_id))  # [D, B, N]
        k = min(lens_k, lens.top_ids.shape[-1])
        ids.update(int(i) for i in lens.top_ids[..., :k].unique().tolist() if i >= 0)
        lens_data = {"labels": list(lens.labels), "samples": [
            {str(st): [[[[int(i), _finite(float(q))] for i, q in zip(lens.top_ids[si, d, b, p, :k].tolist(),
                                                                      lens.top_probs[si, d, b, p, :k].tolist()) if i >= 0]
                         for p in range(N)] for d in range(len(lens.labels))]
             for si, st in enumerate(lens.steps)} for b in range(B)],
            "decided_at": [decided[:, b].tolist() for b in range(B)]}
    kv_reuse = next((r.kv_reuse for r in records if r.kv_reuse is not None), None)
    exact = next((r.exact for r in records if r.exact is not None), None)
    return {"prompt_len": prompt_len, "placeholder": PLACEHOLDER, "kv_reuse": kv_reuse, "exact": exact,
            "tokens": {str(i): token_text(i) for i in sorted(ids)}, "samples": samples, "lens": lens_data,
            "entropy_scale": entropy_scale(records)}


def entropy_scale(records: Sequence[StepRecord], n: int = SCALE_STEPS) -> list[float]:
    """The heat map's colour scale: the ``n + 1`` quantiles (0, 1/n, ..., 1) of every candidate's entropy (nats)
    over all samples and steps, so colours compare across samples and spread evenly over the cells ([] if none)."""
    ent = torch.cat([r.entropy.flatten().double().cpu() for r in records]) if records else torch.zeros(0)
    ent = ent[torch.isfinite(ent)]
    if ent.numel() == 0:
        return []
    return [round(float(q), 4) for q in torch.quantile(ent, torch.linspace(0, 1, n + 1, dtype=torch.float64))]


class _Replay:
    """What :meth:`~dlmlab.sampling.lens.TrajectoryLens.decided_at` reads of a trajectory, from its records."""

    def __init__(self, records: Sequence[StepRecord], canvas: torch.Tensor, mask_id: int) -> None:
        self._by_step = {r.step: r for r in records}
        self.canvas, self.mask_id = canvas.cpu(), mask_id
        self.tokens = records[-1].tokens.cpu() if records else self.canvas

    def masked(self, step: int) -> torch.Tensor:
        before = self.canvas if step == 0 else self._by_step[step - 1].tokens.cpu()
        return before == self.mask_id


def trajectory_page(records: Sequence[StepRecord], canvas: torch.Tensor, prompt_len: int, mask_id: int,
                    token_text: Callable[[int], str], title: str = "denoising trajectory",
                    notes: Sequence[str] = (), lens=None) -> str:
    """A self-contained HTML page (one string) showing the trajectory (see :func:`trajectory_data`);
    ``notes``: lines shown under the title (e.g. the model and the decoder settings); ``lens``: a
    :class:`~dlmlab.sampling.lens.TrajectoryLens` of the same decode, shown per layer for a chosen position."""
    data = trajectory_data(records, canvas, prompt_len, mask_id, token_text, lens)
    payload = json.dumps(data, ensure_ascii=True, allow_nan=False).replace("</", "<\\/")
    label = ("kv_reuse: none" if data["kv_reuse"] in (None, "none") else f"kv_reuse: {data['kv_reuse']}") + (
        "" if data["exact"] is None else (" (exact)" if data["exact"] else " (approximate: logits differ from "
                                          "recomputing every position)"))
    lines = "".join(f"<p class=\"note\">{html.escape(n)}</p>" for n in [*notes, label])
    return PAGE.replace("__TITLE__", html.escape(title)).replace("__NOTES__", lines).replace("__DATA__", payload)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:80em;color:#222}
.note{margin:.2em 0;color:#555}
#controls{margin:1em 0;display:flex;gap:.6em;align-items:center;flex-wrap:wrap}
#slider{width:24em}
#canvas{font-family:ui-monospace,monospace;line-height:2.1;border:1px solid #ccc;padding:.6em;white-space:pre-wrap}
#canvas span{padding:.1em .15em;margin:0 1px;border-radius:3px;cursor:pointer}
.prompt{background:#eee;color:#555}.done{background:#e6f0ff}.masked{color:#aaa;background:#fafafa}
.now{background:#ffd76a;outline:1px solid #c90}.chosen{box-shadow:0 0 0 2px #c0f}
.ws{color:#b05;font-weight:bold}
#text{white-space:pre-wrap;font-family:ui-monospace,monospace;border-left:3px solid #ccc;padding-left:.6em}
#steps{list-style-position:inside;padding:0;margin:0;max-height:16em;overflow-y:auto;border:1px solid #ddd;
 display:grid;grid-template-columns:repeat(auto-fill,minmax(24em,1fr));font-size:.9em}
#steps li{cursor:pointer;padding:.15em .4em;border-bottom:1px solid #f0f0f0;overflow-wrap:anywhere}
#steps li.cur{font-weight:bold;color:#05a;background:#eef5ff}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.15em .5em;text-align:left}
#heat-wrap{overflow:auto;max-height:32em;border:1px solid #ddd}
#heat{border-collapse:collapse;font-size:.7em;font-family:ui-monospace,monospace}
#heat td,#heat th{border:none;padding:0;min-width:1.2em;height:1.2em;text-align:center}
#heat td.cell{cursor:pointer;border:1px solid #fff}
#heat td.commit{outline:2px solid #c60;outline-offset:-2px}
#heat th.cur,#heat td.cur{box-shadow:inset 0 0 0 1px #05a}
#heat th{position:sticky;top:0;background:#fff;font-weight:normal;color:#666}
#heat th.pos{position:sticky;left:0;text-align:right;padding-right:.4em}
#heat th.step{writing-mode:vertical-rl;transform:rotate(180deg);padding:.2em 0;line-height:1.2em;text-align:left}
#legend{display:flex;align-items:center;gap:.5em;margin:.4em 0;font-size:.85em;color:#555}
#legend-bar{position:relative;width:22em;height:1em;border:1px solid #ccc}
#legend-ticks{position:relative;width:22em;height:1.2em;font-family:ui-monospace,monospace;font-size:.85em}
#legend-ticks span{position:absolute;transform:translateX(-50%)}
#lens-steps td.decided{outline:2px solid #c60;outline-offset:-2px}
#lens td,#lens th{font-family:ui-monospace,monospace;font-size:.9em}
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
__PH__: still masked; <span class="ws">&#9251;</span> a space, <span class="ws">&#8677;</span> a tab,
<span class="ws">&#8629;</span> a newline.  Click a position to choose it for the logit lens.</p>
<div id="canvas"></div>
<h2>Text so far</h2>
<div id="text"></div>
<h2>Committed at this step</h2>
<table id="commits"><thead><tr><th>position</th><th>token</th><th>confidence</th></tr></thead><tbody></tbody></table>
<h2>Entropy: positions &times; steps</h2>
<p class="note">one row per position, one column per step of this sample (decoder step numbers on top);
colour: the candidates' entropy (nats), on one scale for every sample of the page, by its rank among all the
page's candidate cells (the legend gives the entropy at every tenth); outlined: committed at that step;
blank: not a candidate.  Hover a cell for the step's top alternatives there; click it to go to that step and
choose that position.</p>
<div id="legend"><span>entropy (nats)</span><div><div id="legend-bar"></div><div id="legend-ticks"></div></div></div>
<div id="heat-wrap"><table id="heat"></table></div>
<h2>Logit lens at the chosen position</h2>
<p class="note" id="lens-note"></p>
<table id="lens"><thead></thead><tbody></tbody></table>
<h3>The chosen position's lens over the steps</h3>
<p class="note" id="lens-steps-note"></p>
<table id="lens-steps"><thead></thead><tbody></tbody></table>
<h2>Steps</h2>
<ol id="steps" start="0"></ol>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
let cur = 0, k = 0, chosen = -1;
const tokText = (t) => (t < 0 ? D.placeholder : (D.tokens[String(t)] ?? "<" + t + ">"));
// pure helpers (tests/test_trajectory_page.py runs this part in node)
const WS = {" ": "\\u2423", "\\t": "\\u21e5", "\\n": "\\u21b5\\n", "\\r": "\\u240d"};
const show = (s) => s.replace(/[ \\t\\n\\r]/g, (c) => WS[c]);
const inline = (s) => show(s).replace(/\\n/g, "");  // one line: tooltips, tables, the lens
const isWs = (s) => s.length > 0 && /^[ \\t\\n\\r]+$/.test(s);
const fmt = (x) => (x === null || x === undefined ? "n/a" : x.toFixed(3));
const quote = (s) => "\\u201c" + inline(s) + "\\u201d";
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
function rank(h, Q) {  // entropy -> [0, 1]: its place among the scale's quantiles Q (piecewise linear)
  if (!Q.length) return 0;
  if (h <= Q[0]) return 0;
  for (let i = 1; i < Q.length; i++) if (h <= Q[i]) {
    const w = Q[i] - Q[i - 1];
    return (i - 1 + (w > 0 ? (h - Q[i - 1]) / w : 1)) / (Q.length - 1);
  }
  return 1;
}
function colour(u) {  // [0, 1] -> viridis, low entropy dark
  const x = Math.max(0, Math.min(1, u)) * (VIRIDIS.length - 1), i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i, a = VIRIDIS[i], b = VIRIDIS[i + 1];
  return "rgb(" + a.map((v, j) => Math.round(v + f * (b[j] - v))).join(",") + ")";
}
// end of the pure helpers
const alts = (a) => a.map(([t, p]) => quote(tokText(t)) + " " + fmt(p)).join(", ");
function sample() { return D.samples[cur]; }
function fillLegend() {
  const Q = D.entropy_scale || [], n = Q.length - 1;
  $("legend-bar").style.background = "linear-gradient(to right," +
    [0, 0.25, 0.5, 0.75, 1].map((u) => colour(u) + " " + (100 * u) + "%").join(",") + ")";
  $("legend-ticks").replaceChildren();
  if (n < 1) return;
  for (let i = 0; i <= n; i += n / 2) {
    const sp = document.createElement("span");
    sp.style.left = (100 * i / n) + "%";
    sp.textContent = Q[Math.round(i)].toFixed(3);
    $("legend-ticks").appendChild(sp);
  }
}
function fillHeat() {
  const S = sample(), tab = $("heat"), N = S.canvas.length, Q = D.entropy_scale || [];
  tab.replaceChildren();
  const head = tab.insertRow();
  const corner = document.createElement("th"); corner.className = "pos"; corner.textContent = "pos"; head.appendChild(corner);
  S.steps.forEach((st, j) => { const th = document.createElement("th"); th.textContent = String(st.step);
    th.className = "step"; th.title = "decoder step " + st.step;
    th.dataset.col = String(j); head.appendChild(th); });
  for (let p = 0; p < N; p++) {
    const tr = tab.insertRow();
    const th = document.createElement("th"); th.className = "pos"; th.textContent = String(p); tr.appendChild(th);
    S.steps.forEach((st, j) => {
      const td = tr.insertCell();
      td.dataset.pos = String(p); td.dataset.col = String(j);
      const h = st.entropy ? st.entropy[p] : null;
      const c = st.commits.find((x) => x[0] === p);
      if (h !== null && h !== undefined) {
        td.className = "cell" + (c ? " commit" : "");
        td.style.background = colour(rank(h, Q));
        const a = st.top && st.top[String(p)] ? alts(st.top[String(p)]) : "";
        td.title = "position " + p + ", decoder step " + st.step + ", entropy " + fmt(h) +
          (c ? ", committed " + quote(tokText(c[1])) : "") + (a ? "\\ntop: " + a : "");
        td.addEventListener("click", () => { k = j; chosen = p; render(); });
      }
    });
  }
}
function renderLens() {
  const note = $("lens-note"), head = $("lens").tHead, body = $("lens").tBodies[0];
  head.replaceChildren(); body.replaceChildren();
  const S = sample(), st = S.steps[k];
  if (!D.lens) { note.textContent = "no logit lens in this page (trajectory_page(..., lens=trajectory_lens(traj, model)))"; return; }
  if (chosen < 0) { note.textContent = "choose a position (click the canvas or the heat map)"; return; }
  const L = D.lens.samples[cur][String(st.step)];
  if (!L) { note.textContent = "decoder step " + st.step + " was not cached for the lens"; return; }
  note.textContent = "position " + chosen + ", decoder step " + st.step + ": top tokens of the residual stream at each depth";
  const hr = head.insertRow();
  for (const t of ["depth", "top tokens (probability)"]) { const th = document.createElement("th"); th.textContent = t; hr.appendChild(th); }
  D.lens.labels.forEach((lab, d) => {
    const tr = body.insertRow();
    tr.insertCell().textContent = lab;
    const a = L[d][chosen];
    tr.insertCell().textContent = a.length ? alts(a) : "not computed at this step";
  });
}
function renderLensSteps() {
  const note = $("lens-steps-note"), head = $("lens-steps").tHead, body = $("lens-steps").tBodies[0];
  head.replaceChildren(); body.replaceChildren();
  if (!D.lens || chosen < 0) { note.textContent = ""; return; }
  const S = sample();
  const done = S.steps.find((st) => st.commits.some((c) => c[0] === chosen));
  const last = done ? done.step : Infinity;  // masked at the input of the steps up to its commit
  const steps = Object.keys(D.lens.samples[cur]).map(Number).filter((s) => s <= last).sort((a, b) => a - b);
  if (S.canvas[chosen] >= 0 || !steps.length) {
    note.textContent = "position " + chosen + " was never masked at a cached step"; return;
  }
  const dec = D.lens.decided_at[cur];
  note.textContent = "position " + chosen + ": top-1 token (probability) at each depth and each cached decoder step " +
    "while it was masked" + (done ? " (committed at step " + done.step + ")" : "") +
    "; decided at: the first step whose top-1 is the final token (outlined), -1 never";
  const hr = head.insertRow();
  for (const t of ["depth", "decided at", ...steps.map((s) => "step " + s)]) {
    const th = document.createElement("th"); th.textContent = t; hr.appendChild(th);
  }
  D.lens.labels.forEach((lab, d) => {
    const tr = body.insertRow();
    tr.insertCell().textContent = lab;
    tr.insertCell().textContent = String(dec[d][chosen]);
    for (const s of steps) {
      const a = D.lens.samples[cur][String(s)][d][chosen], td = tr.insertCell();
      td.textContent = a.length ? quote(tokText(a[0][0])) + " " + fmt(a[0][1]) : "n/a";
      if (s === dec[d][chosen]) td.className = "decided";
    }
  });
}
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
    const raw = tokText(t);
    el.textContent = show(raw);
    el.dataset.pos = String(p);
    let cls = "";
    if (p < D.prompt_len && S.canvas[p] >= 0) cls = "prompt";
    else if (now.has(p)) {
      cls = "now";
      const c = now.get(p);
      el.title = "position " + p + ", confidence " + fmt(c);
    } else if (t < 0) cls = "masked";
    else if (S.canvas[p] < 0) cls = "done";
    if (t >= 0 && isWs(raw)) cls += " ws";
    if (p === chosen) cls += " chosen";
    el.className = cls.trim();
    el.addEventListener("click", () => { chosen = p; render(); });
    box.appendChild(el);
  });
  $("text").textContent = canvas.map(tokText).join("");
  const body = $("commits").tBodies[0];
  body.replaceChildren();
  if (n) for (const [p, t, c] of st.commits.slice().sort((a, b) => a[0] - b[0])) {
    const tr = body.insertRow();
    tr.dataset.pos = String(p);
    tr.insertCell().textContent = String(p);
    tr.insertCell().textContent = inline(tokText(t));
    tr.insertCell().textContent = fmt(c);
  }
  const ol = $("steps");
  [...ol.children].forEach((li, j) => li.classList.toggle("cur", j === k));
  for (const el of $("heat").querySelectorAll(".cur")) el.classList.remove("cur");
  for (const el of $("heat").querySelectorAll('[data-col="' + k + '"]')) el.classList.add("cur");
  renderLens();
  renderLensSteps();
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
    li.title = li.textContent;
    li.addEventListener("click", () => { k = j; render(); });
    ol.appendChild(li);
  });
}
D.samples.forEach((_, i) => { const o = document.createElement("option"); o.value = String(i);
  o.textContent = String(i); $("sample").appendChild(o); });
if (D.samples.length < 2) $("sample-box").style.display = "none";
$("sample").addEventListener("change", (e) => { cur = Number(e.target.value); k = 0; fillSteps(); fillHeat(); render(); });
$("slider").addEventListener("input", (e) => { k = Number(e.target.value); render(); });
$("prev").addEventListener("click", () => { k -= 1; render(); });
$("next").addEventListener("click", () => { k += 1; render(); });
fillLegend();
fillSteps();
fillHeat();
render();
</script>
</body></html>
""".replace("__PH__", html.escape(PLACEHOLDER))
