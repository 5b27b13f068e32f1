"""docs/trajectory.md's worked example runs: every ```python block, in order, in one namespace (like a notebook), in
a temporary folder; it trains its tiny masked-diffusion model first, so the documented API cannot drift."""

from __future__ import annotations

from pathlib import Path

from test_readme import python_blocks

DOC = Path(__file__).resolve().parents[1] / "docs" / "trajectory.md"


def test_trajectory_doc_example_runs(tmp_path, monkeypatch, capsys):
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) >= 8
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "doc:trajectory"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/trajectory.md[block {i}]", "exec"), ns)  # noqa: S102 - our own docs
    out = capsys.readouterr().out
    assert "unchanged before step 3: True" in out and "mask_rate_steering" in out
    assert (tmp_path / "trajectory.html").read_text().startswith("<!DOCTYPE html>")
    assert ns["traj"].exact and ns["res"].random and len(ns["res"].random) >= 200
