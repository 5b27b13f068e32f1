"""The rating page (one static HTML document, inline CSS + JS, no external resources) and the results page."""

from __future__ import annotations

import html

from dlmlab.rating.store import RatingStore

CSS = """
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.55 -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, Arial, sans-serif;
       color: #1d2430; background: #f5f7fa; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 24px 48px; }
header { display: flex; justify-content: space-between; align-items: baseline; gap: 12px; flex-wrap: wrap; }
h1 { font-size: 1.35rem; margin: 0 0 6px; }
.muted { color: #5b6577; font-size: 0.9rem; }
a { color: #0b5cad; }
.prompt { background: #fff; border: 1px solid #d9dee7; border-left: 4px solid #9db4d0; border-radius: 6px;
          padding: 12px 16px; margin: 14px 0; white-space: pre-wrap; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
.card { background: #fff; border: 1px solid #d9dee7; border-radius: 8px; padding: 14px 16px; }
.card h2 { font-size: 1rem; margin: 0 0 8px; color: #5b6577; }
.text { white-space: pre-wrap; word-wrap: break-word; font-family: Georgia, "Times New Roman", serif; }
.buttons { display: flex; justify-content: center; gap: 14px; margin: 18px 0 6px; }
button { font: inherit; padding: 9px 22px; border-radius: 8px; border: 1px solid #9db4d0; background: #fff;
         cursor: pointer; }
button:hover { background: #e8f0fa; } button:disabled { opacity: .5; cursor: default; }
#status { text-align: center; }
#error { color: #b42318; text-align: center; min-height: 1.4em; }
#done { display: none; text-align: center; background: #dafbe1; border-radius: 8px; padding: 18px; margin-top: 18px; }
table { border-collapse: collapse; margin: 12px 0; background: #fff; }
th, td { border-bottom: 1px solid #d9dee7; padding: 6px 12px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #eef1f5; }
@media (max-width: 760px) { .pair { grid-template-columns: 1fr; } }
"""

RATE_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"><title>dlmlab: blind pairwise rating</title><style>__CSS__</style></head>
<body><main>
<header><h1>Which continuation is better?</h1>
<span class="muted"><span id="progress"></span> · <a href="/results">win rates (reveals methods)</a></span></header>
<p class="muted">Two samples for the same prompt, from two different methods, in random order. The methods are hidden.
Keys: <b>&larr;</b> or <b>1</b> = A, <b>&darr;</b> or <b>2</b> = tie, <b>&rarr;</b> or <b>3</b> = B.</p>
<div id="rating">
<div class="prompt" id="prompt"></div>
<div class="pair">
  <div class="card"><h2>Sample A</h2><div class="text" id="left"></div></div>
  <div class="card"><h2>Sample B</h2><div class="text" id="right"></div></div>
</div>
<div class="buttons">
  <button id="choose-left" data-choice="left">A is better</button>
  <button id="choose-tie" data-choice="tie">Tie</button>
  <button id="choose-right" data-choice="right">B is better</button>
</div>
</div>
<div id="done">Every pair has been rated. <a href="/results">See the win rates.</a></div>
<div id="status" class="muted"></div><div id="error"></div>
<script>
"use strict";
let token = null, busy = false;
const $ = (id) => document.getElementById(id);
function setProgress(d) { $("progress").textContent = `${d.rated} of ${d.total} pairs rated`; }
async function next() {
  busy = true; $("error").textContent = "";
  try {
    const r = await fetch("/api/next", {cache: "no-store"});
    const d = await r.json();
    if (!r.ok) throw new Error(d.error || r.statusText);
    setProgress(d);
    if (d.done) { token = null; $("rating").style.display = "none"; $("done").style.display = "block"; return; }
    token = d.token;
    $("prompt").textContent = d.prompt; $("left").textContent = d.left; $("right").textContent = d.right;
    document.body.dataset.ready = "1";
  } catch (e) { $("error").textContent = "could not load the next pair: " + e.message; }
  finally { busy = false; }
}
async function choose(choice) {
  if (!token || busy) return;
  busy = true; document.body.dataset.ready = "0";
  try {
    const r = await fetch("/api/choice", {method: "POST", headers: {"Content-Type": "application/json"},
                                          body: JSON.stringify({token, choice})});
    const d = await r.json();
    if (!r.ok && r.status !== 409) throw new Error(d.error || r.statusText);
    $("status").textContent = r.ok ? `saved (${d.rated} so far)` : "that pair expired; here is another";
  } catch (e) { $("error").textContent = "could not save the choice: " + e.message; busy = false; return; }
  busy = false; next();
}
for (const b of document.querySelectorAll("button[data-choice]")) {
  b.addEventListener("click", () => choose(b.dataset.choice));
}
document.addEventListener("keydown", (e) => {
  const k = {ArrowLeft: "left", "1": "left", ArrowDown: "tie", "2": "tie", ArrowRight: "right", "3": "right"}[e.key];
  if (k) { e.preventDefault(); choose(k); }
});
next();
</script>
</main></body></html>
""".replace("__CSS__", CSS)


def results_page(store: RatingStore, samples_path: str) -> str:
    """Server-rendered win-rate table and head-to-head counts."""
    esc = html.escape
    rows = []
    for w in store.win_rates():
        lo, hi = w.ci95
        rows.append(f"<tr><td>{esc(w.method)}</td><td>{w.win_rate:.3f}</td><td>[{lo:.2f}, {hi:.2f}]</td>"
                    f"<td>{w.wins}</td><td>{w.ties}</td><td>{w.losses}</td><td>{w.comparisons}</td></tr>")
    h2h = "".join(f"<tr><td>{esc(a)} vs {esc(b)}</td><td>{wa}</td><td>{t}</td><td>{wb}</td></tr>"
                  for (a, b), (wa, t, wb) in store.head_to_head().items())
    body = (
        "<table id=\"win-rates\"><thead><tr><th>method</th><th>win rate</th><th>95% CI</th><th>wins</th>"
        f"<th>ties</th><th>losses</th><th>comparisons</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "<h2>Head to head</h2><table><thead><tr><th>A vs B</th><th>A wins</th><th>ties</th><th>B wins</th></tr>"
        f"</thead><tbody>{h2h}</tbody></table>"
        if rows else "<p>No choices yet.</p>"
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        f"<title>dlmlab: win rates</title><style>{CSS}</style></head><body><main>"
        f"<h1>Win rates</h1><p class=\"muted\">{store.count()} choices from <code>{esc(samples_path)}</code>, "
        f"stored in <code>{esc(str(store.path))}</code>. Win rate = (wins + ties/2) / comparisons; "
        f"95% Wilson interval.</p>{body}<p><a href=\"/\">back to rating</a></p></main></body></html>"
    )
