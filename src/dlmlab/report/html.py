"""One self-contained ``report.html`` for an ``all`` run (or one study's run, ``reproduce STUDY``): figures embedded as base64 PNG, inline CSS,
no scripts and no external resources.

Input is the manifest of :mod:`dlmlab.studies.all` (``{"preset", "studies": {name: {...}}, "environment"}``)
and each study's ``OUT/<study>/results.json`` (see :mod:`dlmlab.report.results`).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
from pathlib import Path
from typing import Any

from dlmlab.files import atomic_write_text
from dlmlab.report.claims import count_verdicts, is_extension, judgement_of, verdict_summary
from dlmlab.report.results import fmt, load_results

CSS = """
:root { --fg:#1d2430; --muted:#5b6577; --line:#d9dee7; --bg:#ffffff; --soft:#f5f7fa;
        --ok:#1a7f37; --okbg:#dafbe1; --bad:#b42318; --badbg:#fee4e2; --na:#5b6577; --nabg:#eef1f5;
        --warn:#8a5a00; --warnbg:#fff4d6; }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.55 -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, "Helvetica Neue",
       Arial, sans-serif; color:var(--fg); background:var(--bg); }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 64px; }
h1 { font-size: 1.75rem; margin: 0.2em 0 0.1em; }
h2 { font-size: 1.35rem; margin: 2.2em 0 0.4em; padding-top: 0.6em; border-top: 2px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.6em 0 0.5em; color: var(--fg); }
p.meta, .muted { color: var(--muted); font-size: 0.92rem; }
nav ul { list-style: none; padding: 0; margin: 0.4em 0; display: flex; flex-wrap: wrap; gap: 6px 18px; }
a { color: #0b5cad; text-decoration: none; } a:hover { text-decoration: underline; }
table { border-collapse: collapse; width: 100%; margin: 0.5em 0 1em; font-size: 0.9rem; }
th, td { border-bottom: 1px solid var(--line); padding: 6px 9px; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
tbody tr:nth-child(even) td { background: #fbfcfd; }
table.results, table.summary, table.environment { width: auto; min-width: 55%; }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.caption { font-weight: 600; margin-top: 1.2em; }
.note { color: var(--muted); font-size: 0.85rem; margin-top: -0.6em; }
.badge { display: inline-block; padding: 1px 9px; border-radius: 999px; font-size: 0.8rem; font-weight: 600;
         white-space: nowrap; }
.holds, .reproduced, .ran, .reused { color: var(--ok); background: var(--okbg); }
.fails, .contradicted, .failed, .missing, .interrupted { color: var(--bad); background: var(--badbg); }
.inconclusive { color: var(--warn); background: var(--warnbg); }
.na, .pending, .running { color: var(--na); background: var(--nabg); }
.verdict-detail { display: block; color: var(--muted); font-size: 0.82rem; margin-top: 3px; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.84rem; }
code { background: var(--soft); padding: 0 4px; border-radius: 4px; }
pre { background: var(--soft); padding: 10px 12px; border-radius: 6px; overflow-x: auto; max-height: 420px; }
pre.error { background: var(--badbg); color: #611; }
ul.evidence { list-style: none; margin: 0; padding: 0; }
ul.evidence li { margin: 0; }
ul.evidence .k, div.seed .k { color: var(--muted); }\ndiv.seed { margin-top: 4px; font-size: 0.9em; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap: 18px; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 10px; background: #fff; }
figure.wide { grid-column: 1 / -1; }
table.claims td:nth-child(4) { min-width: 240px; } table.claims td:nth-child(2) { min-width: 260px; }
figure img { max-width: 100%; height: auto; display: block; margin: 0 auto; }
figcaption { font-size: 0.86rem; color: var(--muted); margin-top: 6px; }
details { margin: 0.6em 0; } summary { cursor: pointer; color: var(--muted); }
.setup { background: var(--soft); border-left: 4px solid #9db4d0; padding: 10px 14px; border-radius: 4px; }
"""

_MAX_JSON = 60_000


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _badge(status: str, text: str | None = None) -> str:
    return f'<span class="badge {esc(status)}">{esc(text or status)}</span>'


def verdict_html(c: dict) -> str:
    """The claim's verdict as a badge (``reproduced`` / ``contradicted`` / ``inconclusive (reason)``), its detail
    under it; a results.json written before verdicts: from ``holds`` (``does not hold`` stays unjudged)."""
    j = judgement_of(c)
    out = _badge(j.verdict, j.label())
    return out + (f'<span class="verdict-detail">{esc(j.detail)}</span>' if j.detail else "")


def claims_text(m: dict) -> str:
    """A manifest row's claims: ``6: 4 reproduced, 1 contradicted, 1 inconclusive (1 underpowered)``; ``-``
    when unknown; ``2 / 5 hold`` for a manifest written before verdicts."""
    if m.get("claims_total") is None:
        return "-"
    if m.get("claims_verdicts") is None:
        return f"{m.get('claims_hold')} / {m['claims_total']} hold"
    return f"{m['claims_total']}: {verdict_summary(m['claims_verdicts'])}"


def total_claims_text(studies) -> str:
    """The claims of every study (manifest rows), verdict counts summed; "" when no row has them."""
    rows = [s for s in studies if s.get("claims_verdicts") is not None and s.get("claims_total") is not None]
    if not rows:
        return ""
    counts: dict[str, int] = {}
    for s in rows:
        for k, v in s["claims_verdicts"].items():
            counts[k] = counts.get(k, 0) + v
    return f"{sum(s['claims_total'] for s in rows)}: {verdict_summary(counts)}"


def _round(v: Any) -> Any:
    """Floats inside nested evidence to 4 significant digits (for display only)."""
    if isinstance(v, float):
        return float(f"{v:.4g}")
    if isinstance(v, dict):
        return {k: _round(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_round(x) for x in v]
    return v


def _short_json(v: Any, limit: int = 240) -> str:
    s = json.dumps(_round(v), default=str)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def num(v: float) -> str:
    """4 significant digits (no exponent below 1e6); integers stay integers."""
    if v == 0 or 1e-4 <= abs(v) < 1e6:
        s = f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
        return s if "e" not in s else f"{v:.6f}".rstrip("0")
    return f"{v:.3e}"


def _value(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return f"<code>{esc(_short_json(v))}</code>"
    return esc(num(v) if isinstance(v, float) else fmt(v))


def _cell(v: Any) -> str:
    cls = ' class="num"' if _is_num(v) else ""
    return f"<td{cls}>{_value(v)}</td>"


def fmt_duration(s: float | None) -> str:
    """``12.3 s``, ``4m 05s``, ``1h 02m 03s``; ``-`` for unknown."""
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {sec:02d}s" if h else f"{m}m {sec:02d}s"


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def table_html(t: dict) -> str:
    cols = t.get("columns") or []
    rows = t.get("rows") or []
    numeric = [bool(rows) and all(_is_num(r[i]) or r[i] is None for r in rows if i < len(r)) for i in range(len(cols))]
    head = "".join(("<th class=\"num\">" if n else "<th>") + f"{esc(c)}</th>" for c, n in zip(cols, numeric))
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    out = f'<div class="caption">{esc(t.get("title", ""))}</div>'
    out += f'<table class="results"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    if t.get("note"):
        out += f'<p class="note">{esc(t["note"])}</p>'
    return out


#: evidence items shown in a claim's row; the rest are folded under "more"
EVIDENCE_SHOWN = 6


def seed_html(c: dict) -> str:
    """What the claim answers to: the summary line (``FILE:LINE``), what it says, the study's number and any
    deviation; an empty string for a results.json written before claims cited their sentence."""
    from dlmlab.report.seeds import study_effect_text

    if not c.get("seed_says"):
        return ""
    ref = c.get("seed_ref")
    out = f'<div class="seed">{"<code>" + esc(ref) + "</code>: " if ref else "extension: "}{esc(c["seed_says"])}'
    if c.get("study_effect") is not None:
        out += f'<br><span class="k">study\'s effect</span> {esc(study_effect_text(c["study_effect"]))}'
    if c.get("deviation"):
        out += f'<br><span class="k">deviation</span> {esc(c["deviation"])}'
    return out + "</div>"


def evidence_html(ev: dict) -> str:
    """The first :data:`EVIDENCE_SHOWN` evidence items; the rest folded under a ``<details>``."""
    items = [f'<li><span class="k">{esc(k)}</span> = {_value(v)}</li>' for k, v in ev.items()]
    out = f'<ul class="evidence">{"".join(items[:EVIDENCE_SHOWN])}</ul>'
    if len(items) > EVIDENCE_SHOWN:
        out += (f'<details><summary>{len(items) - EVIDENCE_SHOWN} more</summary>'
                f'<ul class="evidence">{"".join(items[EVIDENCE_SHOWN:])}</ul></details>')
    return out


def claims_html(claims: list[dict]) -> str:
    if not claims:
        return '<p class="muted">This study reports no claims.</p>'
    rows = []
    for c in claims:
        rows.append(
            f'<tr id="claim-{esc(c.get("id", ""))}"><td><code>{esc(c.get("id", ""))}</code></td>'
            f'<td>{esc(c.get("statement", ""))}{seed_html(c)}</td><td>{verdict_html(c)}</td>'
            f'<td>{evidence_html(c.get("evidence") or {})}</td></tr>'
        )
    return ('<table class="claims"><thead><tr><th>claim</th><th>statement (and the summary line it tests)</th>'
            f'<th>verdict</th><th>measured evidence</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def figure_html(study_dir: Path, fig: dict) -> str:
    """``<figure>`` with the PNG inlined; a visible note (no broken image) if the file is missing."""
    rel = str(fig.get("path", ""))
    caption = esc(fig.get("caption", ""))
    path = (study_dir / rel).resolve()
    inside = study_dir.resolve() in path.parents
    if not rel or not inside or not path.is_file():
        return f'<figure><p class="muted">figure file missing: <code>{esc(rel)}</code></p>' \
               f"<figcaption>{caption}</figcaption></figure>"
    raw = path.read_bytes()
    data = base64.b64encode(raw).decode("ascii")
    mime = "image/svg+xml" if path.suffix.lower() == ".svg" else "image/png"
    size = _png_size(raw)
    wide = ' class="wide"' if size and size[0] > 1.8 * size[1] else ""  # multi-panel figures span the row
    return (f'<figure{wide}><img src="data:{mime};base64,{data}" alt="{caption}">'
            f"<figcaption>{caption}</figcaption></figure>")


def _png_size(raw: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG header, ``None`` if ``raw`` is not a PNG."""
    if raw[:8] != b"\x89PNG\r\n\x1a\n" or len(raw) < 24:
        return None
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")


def _pre_json(obj: Any) -> str:
    s = json.dumps(obj, indent=1, default=str)
    if len(s) > _MAX_JSON:
        s = s[:_MAX_JSON] + "\n... (truncated; see results.json)"
    return f"<pre>{esc(s)}</pre>"


def study_section(name: str, meta: dict, study_dir: Path) -> str:
    """One study's section: status, setup, claims, results tables, figures, config."""
    title = meta.get("title") or name
    status = meta.get("status", "pending")
    parts = [f'<section id="study-{esc(name)}"><h2>{esc(title)} {_badge(status)}</h2>']
    res = None
    if (study_dir / "results.json").exists():
        try:
            res = load_results(study_dir)
        except ValueError as e:
            parts.append(f'<pre class="error">{esc(e)}</pre>')
    env = (res or {}).get("environment") or {}
    bits = [f"study <code>{esc(name)}</code>", f"wall time {esc(fmt_duration(meta.get('wall_time_s')))}"]
    if res:
        bits.append(f"preset <code>{esc(res.get('preset'))}</code>")
    if env:
        bits.append("ran with " + ", ".join(f"{k} {esc(env[k])}" for k in ("torch", "cuda", "cpu_count")
                                            if env.get(k) is not None))
    where = meta.get("files_in") or f"{name}/"
    bits.append(f"files in <code>{esc(where)}</code>")
    parts.append(f'<p class="meta">{" · ".join(bits)}</p>')
    if status == "missing":
        parts.append(f"<p>Not installed in this checkout: {esc(meta.get('error', ''))}. "
                     "Nothing was run and no results are shown.</p>")
    if meta.get("error") and status != "missing":
        parts.append("<h3>Error</h3>" f'<pre class="error">{esc(meta["error"])}</pre>')
    if res is None:
        parts.append("</section>")
        return "".join(parts)
    if res.get("setup"):
        parts.append(f'<h3>Setup</h3><div class="setup">{esc(res["setup"])}</div>')
    claims = res.get("claims") or []
    own = [c for c in claims if not is_extension(c)]
    ext = [c for c in claims if is_extension(c)]
    parts.append(f"<h3>Claims ({len(own)}: {esc(verdict_summary(count_verdicts(own)))})</h3>")
    parts.append(claims_html(own))
    if ext:
        parts.append(f"<h3>Extensions ({len(ext)}: {esc(verdict_summary(count_verdicts(ext, extensions=True)))}; "
                     "not counted above: no study summary states them)</h3>")
        parts.append(claims_html(ext))
    if res.get("figures"):
        parts.append('<h3>Figures</h3><div class="figures">')
        parts += [figure_html(study_dir, f) for f in res["figures"]]
        parts.append("</div>")
    if res.get("tables"):
        parts.append("<h3>Results</h3>")
        parts += [table_html(t) for t in res["tables"]]
    parts.append("<details><summary>All measured results (results.json)</summary>"
                 f"{_pre_json(res.get('results', {}))}</details>")
    parts.append(f"<details><summary>Configuration</summary>{_pre_json(res.get('config', {}))}</details>")
    parts.append("</section>")
    return "".join(parts)


def _files_in(out: Path, study_dir: Path) -> str:
    """Where a study's files are, as the reader of ``out/report.html`` finds them: ``reversal/``, or ``this
    folder`` when the study wrote into ``out`` itself."""
    try:
        rel = Path(study_dir).resolve().relative_to(Path(out).resolve())
    except ValueError:
        return str(study_dir)
    return "this folder" if str(rel) == "." else f"{rel}/"


def _safe_section(name: str, meta: dict, study_dir: Path) -> str:
    """A study whose results.json has an unexpected shape gets an error box, not a broken report."""
    try:
        return study_section(name, meta, study_dir)
    except Exception as e:  # noqa: BLE001 - the report must still be written
        return (f'<section id="study-{esc(name)}"><h2>{esc(meta.get("title") or name)} '
                f'{_badge("failed", "unreadable")}</h2><pre class="error">could not render '
                f"{esc(study_dir / 'results.json')}: {esc(type(e).__name__)}: {esc(e)}</pre></section>")


def _summary(studies: dict) -> str:
    rows = []
    for name, m in studies.items():
        claims = claims_text(m)
        rows.append(f'<tr><td><a href="#study-{esc(name)}">{esc(m.get("title") or name)}</a></td>'
                    f"<td>{_badge(m.get('status', 'pending'))}</td>"
                    f'<td class="num">{esc(fmt_duration(m.get("wall_time_s")))}</td>'
                    f'<td>{esc(claims)}</td></tr>')
    total = sum(m.get("wall_time_s") or 0.0 for m in studies.values())
    rows.append(f'<tr><th>total</th><th></th><th class="num">{esc(fmt_duration(total))}</th>'
                f'<th>{esc(total_claims_text(studies.values()))}</th></tr>')
    return ('<table class="summary"><thead><tr><th>study</th><th>status</th><th>wall time</th>'
            f'<th>claims</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _environment(env: dict) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{_value(v)}</td></tr>" for k, v in env.items())
    return f'<table class="environment"><tbody>{rows}</tbody></table>'


def render_report(out: Path, manifest: dict, title: str = "dlmlab: reproduction of the four studies",
                  dirs: dict[str, Path] | None = None) -> str:
    """The page; each study's files are read from ``dirs[name]`` (default ``out/<name>``, as ``reproduce all``
    lays them out; ``reproduce STUDY`` writes them into ``out`` itself)."""
    studies = manifest.get("studies") or {}
    preset = manifest.get("preset", "?")
    stamp = _dt.datetime.fromtimestamp(manifest.get("updated") or 0).strftime("%Y-%m-%d %H:%M")
    nav = "".join(f'<li><a href="#study-{esc(n)}">{esc(m.get("title") or n)}</a></li>' for n, m in studies.items())
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">preset <code>{esc(preset)}</code> · written {esc(stamp)} · '
        f"output folder <code>{esc(out)}</code></p>",
        f'<nav><ul>{nav}<li><a href="#environment">Environment</a></li></ul></nav>',
        "<h3>Summary</h3>",
        _summary(studies),
        '<p class="muted">A claim is a statement checked against this run\'s measurements; it is reported '
        "as it came out: <b>reproduced</b> (it beats its control; an interval excludes 0 on the study's side), "
        "<b>contradicted</b> (an interval excludes 0 on the other side, or the mechanism is absent while its "
        "preconditions hold) or <b>inconclusive</b> with a reason: <i>underpowered</i> (the interval spans 0 and "
        "the study's effect), <i>effect excluded</i> (the interval spans 0 but excludes the study's reported "
        "effect: any effect here is smaller), <i>scale</i> (a one-seed mechanism points the study's way but falls "
        "short of its level), <i>precondition</i> (the model never learned the task the claim is about), "
        "<i>not run</i> (this preset did not run what the claim needs).  Intervals are Student-t 95% intervals "
        "over the stated number of seeds; random controls are judged by a permutation p-value over at least "
        "200 draws.</p>",
    ]
    body += [_safe_section(n, {**m, "files_in": _files_in(out, (dirs or {}).get(n, out / n))},
                           (dirs or {}).get(n, out / n)) for n, m in studies.items()]
    body.append('<section id="environment"><h2>Environment</h2>')
    body.append(_environment(manifest.get("environment") or {}))
    body.append("<h3>Wall time per study</h3>" + _summary(studies) + "</section>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(title)} ({esc(preset)})</title><style>{CSS}</style></head>"
        f"<body><main>{''.join(body)}</main></body></html>\n"
    )


def write_report(out: str | Path, manifest: dict, title: str | None = None,
                 dirs: dict[str, Path] | None = None) -> Path:
    """Write ``out/report.html`` atomically; returns its path (``title`` / ``dirs``: see :func:`render_report`)."""
    out = Path(out)
    path = out / "report.html"
    kw = {"title": title} if title is not None else {}
    atomic_write_text(path, render_report(out, manifest, dirs=dirs, **kw))
    return path
