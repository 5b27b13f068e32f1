"""The self-contained report.html of `dlmlab reproduce all` (content checks + headless Chromium)."""

from __future__ import annotations

import re

import pytest

from browser_util import browser, console_errors  # noqa: F401
from dlmlab.report.claims import REPRODUCED, contradicted, precondition_failed, underpowered
from dlmlab.report.html import fmt_duration, num, render_report
from dlmlab.studies.all import StudiesFailed, run_all
from fake_studies import install, make_study


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """An `all` run with two finished studies, one crashed and one missing."""
    mp = pytest.MonkeyPatch()
    out = tmp_path_factory.mktemp("all")
    alpha = (REPRODUCED, contradicted("gap [-0.5, -0.2] below 0"), underpowered("gap [-0.1, 0.3] spans 0"),
             precondition_failed("accuracy <at> chance"), None)
    install(mp, {"alpha": make_study("alpha", holds=alpha), "beta": make_study("beta", holds=(True, False)),
                 "crashy": make_study("crashy", crash=ZeroDivisionError("division <by> zero")), "gone": None})
    with pytest.raises(StudiesFailed) as ei:
        run_all("smoke", out, progress=False)
    mp.undo()
    return ei.value.report


def test_report_content(report):
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>")
    # every figure embedded, none linked
    imgs = re.findall(r'<img src="([^"]+)"', html)
    assert len(imgs) == 4 and all(s.startswith("data:image/png;base64,iVBOR") for s in imgs)
    # self-contained: no external resources of any kind
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<script" not in html and "@import" not in html and "url(" not in html
    # claims tables: statement, verdict and measured evidence, escaped
    assert html.count('<tr id="claim-') == 7
    assert "alpha statement 0 (a &lt; b &amp; c)" in html
    assert html.count('"badge reproduced">reproduced<') == 2 and html.count('"badge contradicted">contradicted<') == 1
    assert html.count('"badge inconclusive">inconclusive (underpowered)<') == 1
    assert html.count('"badge inconclusive">inconclusive (precondition)<') == 1
    assert html.count('"badge inconclusive">inconclusive (not run)<') == 1
    assert html.count('"badge inconclusive">inconclusive (unjudged)<') == 1  # beta's bare holds=False
    assert '<span class="verdict-detail">gap [-0.1, 0.3] spans 0</span>' in html
    assert "accuracy &lt;at&gt; chance" in html and "does not hold" not in html
    # each study's heading and the summary count every verdict and reason
    assert "Claims (5: 1 reproduced, 1 contradicted, 3 inconclusive (1 underpowered, 1 precondition, 1 not run))" \
        in html
    assert "<td>2: 1 reproduced, 0 contradicted, 1 inconclusive (1 unjudged)</td>" in html
    assert "<th>7: 2 reproduced, 1 contradicted, 4 inconclusive (1 underpowered, 1 precondition, 1 not run, " \
           "1 unjudged)</th>" in html
    assert '<span class="k">gap</span> = 0.1<' in html and "[1, 2, 3]" in html
    # setup, results tables, config, captions, escaped
    assert "Setup of alpha: trained &lt;nothing&gt; on fake data." in html
    assert "alpha main table" in html and "lower loss is better" in html and "<td class=\"num\">1.25</td>" in html
    assert "alpha &lt;figure&gt; 0 &amp; caption" in html
    # crashed study with its traceback, missing study reported as such
    assert "ZeroDivisionError: division &lt;by&gt; zero" in html
    assert "Not installed in this checkout" in html
    assert html.count('class="badge failed"') >= 1 and html.count('class="badge missing"') >= 1
    # environment: versions, hardware, wall time per study
    for key in ["torch", "python", "numpy", "cpu_count", "memory_gb", "Wall time per study"]:
        assert f">{key}<" in html, key


def test_missing_figure_file_is_a_note_not_a_broken_image(tmp_path, monkeypatch):
    install(monkeypatch, {"a": make_study("a")})
    path = run_all("smoke", tmp_path, progress=False)
    (tmp_path / "a" / "figures" / "fig1.png").unlink()
    manifest = __import__("json").loads((tmp_path / "run_all.json").read_text())
    html = render_report(tmp_path, manifest)
    assert html.count("<img ") == 1 and "figure file missing: <code>figures/fig1.png</code>" in html
    assert path.exists()


def test_malformed_results_do_not_break_the_report(tmp_path, monkeypatch):
    import json

    install(monkeypatch, {"a": make_study("a"), "b": make_study("b")})
    run_all("smoke", tmp_path, progress=False)
    res = json.loads((tmp_path / "b" / "results.json").read_text())
    res["tables"] = [{"title": "bad", "rows": 5}]
    (tmp_path / "b" / "results.json").write_text(json.dumps(res))
    html = render_report(tmp_path, json.loads((tmp_path / "run_all.json").read_text()))
    assert "could not render" in html and "a main table" in html


def test_png_size(tmp_path):
    from dlmlab.report.figures import new_figure, save_figure
    from dlmlab.report.html import _png_size

    fig, _ = new_figure(ncols=3, width=3.0, height=2.0)
    entry = save_figure(fig, tmp_path, "w", "wide")
    assert _png_size((tmp_path / entry["path"]).read_bytes()) == (990, 220)  # 9 x 2 inches at dpi 110
    assert _png_size(b"GIF89a" + b"0" * 40) is None


def test_nested_evidence_is_rounded_and_truncated():
    from dlmlab.report.html import _short_json

    assert _short_json({"a": [0.123456789, 2], "b": {"c": 1.0000001}}) == '{"a": [0.1235, 2], "b": {"c": 1.0}}'
    long = _short_json(list(range(500)))
    assert len(long) == 240 and long.endswith("...")


def test_number_format():
    assert [num(x) for x in [0.0, 1.25, 0.1234567, 12345.6, 2.5e-7, 3e7, -0.5]] == \
        ["0", "1.25", "0.1235", "12346", "2.500e-07", "3.000e+07", "-0.5"]


def test_fmt_duration():
    assert fmt_duration(None) == "-" and fmt_duration(3.21) == "3.2 s"
    assert fmt_duration(61) == "1m 01s" and fmt_duration(3725) == "1h 02m 05s"


def test_report_renders_in_chromium(report, browser):  # noqa: F811
    page = browser.new_page()
    errors = console_errors(page)
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(report.as_uri(), wait_until="load", timeout=30_000)
    assert "dlmlab" in page.title()
    n_img = page.locator("img").count()
    assert n_img == 4
    widths = page.eval_on_selector_all("img", "els => els.map(e => e.complete ? e.naturalWidth : -1)")
    assert all(w > 0 for w in widths), widths
    assert page.locator("table.claims tbody tr").count() == 7
    badge = page.locator("#claim-alpha_claim_2 .badge")
    assert badge.inner_text() == "inconclusive (underpowered)" and badge.is_visible()
    colors = {v: page.locator(f".badge.{v}").first.evaluate("e => getComputedStyle(e).backgroundColor")
              for v in ("reproduced", "contradicted", "inconclusive")}
    assert len(set(colors.values())) == 3, colors  # three verdicts, three colours
    assert page.locator("#claim-alpha_claim_3 .verdict-detail").inner_text() == "accuracy <at> chance"
    assert page.locator("section").count() == 5  # 4 studies + environment
    assert page.locator("h2", has_text="Fake study alpha").is_visible()
    external = [u for u in requests if not u.startswith(("file:", "data:"))]
    assert external == []
    assert errors == []
    page.close()


@pytest.mark.slow
@pytest.mark.study
def test_real_studies_smoke_end_to_end(tmp_path, browser):  # noqa: F811
    """`reproduce all --preset smoke` with the installed studies (~2 min on 2 cores), report checked in Chromium."""
    import json

    from dlmlab.studies import STUDIES

    report = run_all("smoke", tmp_path, progress=False)
    man = json.loads((tmp_path / "run_all.json").read_text())
    assert {n: s["status"] for n, s in man["studies"].items()} == {n: "ran" for n in STUDIES}
    html = report.read_text()
    n_fig = sum(len(json.loads((tmp_path / n / "results.json").read_text())["figures"]) for n in STUDIES)
    assert n_fig >= len(STUDIES) and html.count("<img ") == n_fig
    page = browser.new_page()
    errors = console_errors(page)
    page.goto(report.as_uri(), wait_until="load", timeout=60_000)
    widths = page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)")
    assert len(widths) == n_fig and all(w > 0 for w in widths)
    assert page.locator("table.claims tbody tr").count() == sum(s["claims_total"] for s in man["studies"].values())
    assert errors == []
    page.close()


def test_results_written_before_verdicts_still_render():
    """A results.json claim with only ``holds`` (older runs): holds -> reproduced, None -> not run, False ->
    inconclusive (unjudged), never a guessed contradiction."""
    from dlmlab.report.html import claims_html, claims_text

    html = claims_html([{"id": "a", "statement": "s", "holds": True, "evidence": {}},
                        {"id": "b", "statement": "s", "holds": False, "evidence": {}},
                        {"id": "c", "statement": "s", "holds": None, "evidence": {}}])
    assert '"badge reproduced">reproduced<' in html and '"badge inconclusive">inconclusive (unjudged)<' in html
    assert '"badge inconclusive">inconclusive (not run)<' in html and "contradicted" not in html
    assert claims_text({"claims_hold": 2, "claims_total": 5}) == "2 / 5 hold"  # an older manifest
    assert claims_text({"claims_total": None}) == "-"
