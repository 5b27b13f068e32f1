"""scripts/ladder_to_docs.py quotes a ladder run's report into its docs page, between the markers, verbatim."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("ladder_to_docs", ROOT / "scripts" / "ladder_to_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REPORT = """# X: scale ladder

Preset: `ladder` - wall time 12 s

## Results

**Table**

| statistic | 32 | 64 |
|---|---|---|
| a | 0.1 | 0.2 |

## Figures

![A caption](figures/ladder.png)

*A caption*
"""


def test_quotes_results_and_figures_between_markers(tmp_path):
    run = tmp_path / "run"
    (run / "figures").mkdir(parents=True)
    (run / "report.md").write_text(REPORT)
    (run / "figures" / "ladder.png").write_bytes(b"png")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.md").write_text("before\n<!-- ladder-results:begin -->\nold\n<!-- ladder-results:end -->\nafter\n")
    assert _script().main(["x", str(run), "--docs", str(docs), "--note", "A note."]) == 0
    text = (docs / "x.md").read_text()
    assert text.startswith("before\n<!-- ladder-results:begin -->") and text.endswith("<!-- ladder-results:end -->\nafter\n")
    assert "old" not in text and "| a | 0.1 | 0.2 |" in text and "Preset: `ladder` - wall time 12 s" in text
    assert "A note." in text and "![A caption](figures/ladder_x_ladder.png)" in text
    assert (docs / "figures" / "ladder_x_ladder.png").read_bytes() == b"png"
    # a second run refreshes the section instead of adding one
    assert _script().main(["x", str(run), "--docs", str(docs)]) == 0
    assert (docs / "x.md").read_text().count("ladder-results:begin") == 1


def test_page_without_markers_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.md").write_text(REPORT)
    (tmp_path / "x.md").write_text("no markers\n")
    assert _script().main(["x", str(run), "--docs", str(tmp_path)]) == 1
    assert "markers" in capsys.readouterr().err


def test_every_study_page_has_the_markers():
    for study in ("induction", "reversal", "state", "prediff"):
        text = (ROOT / "docs" / f"{study}.md").read_text()
        assert text.count("<!-- ladder-results:begin -->") == 1 and text.count("<!-- ladder-results:end -->") == 1
