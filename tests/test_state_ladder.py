"""The state study's scale ladder: margins that match the claims' criteria, and the tiny ladder end to end
(tables with per-size t-intervals, figures, resume)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlmlab.studies.state import claims as C
from dlmlab.studies.state import ladder as LD


def _cell(acc):
    return {"probes": [{"accuracy": a} for a in acc], "n_layers": len(acc) - 1}


def test_margins_are_positive_exactly_when_the_claims_criteria_hold():
    rng = np.random.default_rng(0)
    for _ in range(300):
        acc = rng.uniform(0, 1, size=5)
        c = _cell(acc)
        assert (LD.late_margin(acc) > 0) == C.is_late(c) or LD.late_margin(acc) == 0
        m = LD.gradual_margin(c)
        assert (m >= 0) == C.gradual_row(c)["gradual"] or abs(m) < 1e-12
    assert LD.late_margin([0.5, 0.55, 0.6, 0.62, 1.0]) == pytest.approx(0.38 - 0.05)
    assert LD.gradual_margin(_cell([0.2, 0.5, 0.65, 0.8, 0.95])) == pytest.approx(min(0.45 - 0.1, 0.27 - 0.15))


def test_ladder_stats_and_trend_from_hand_made_runs():
    runs = {}
    for d, top in ((32, 0.6), (128, 1.0)):
        for s in range(3):
            acc = [0.5, 0.52, 0.55, 0.57, top + 0.01 * s]  # the last jump grows with size
            runs[(d, "lstm", "parity", s)] = dict(_cell(acc), train_len=40, acc_by_len={40: top}, learned_level=0.95)
    prof, acc = LD.ladder_stats(runs)
    assert [st.name for st in prof] == ["lstm/parity late margin"]
    assert LD.trend(prof[0]).label == "toward the study with scale"
    assert acc[0].per_size[32.0].mean == pytest.approx(0.6 - 0.95)
    # the summary reports perfect accuracy for the recurrent baselines on parity / S3: the row carries 1 - level
    assert prof[0].study_value is None and acc[0].study_value == pytest.approx(0.05)
    mamba = {(d, "mamba", a, s): c for (d, _, a, s), c in runs.items()}
    assert LD.ladder_stats(mamba)[1][0].study_value is None  # only an ordering for Mamba: no number


@pytest.mark.study  # a study run: outside `make test-fast`
def test_tiny_ladder_end_to_end_and_resume(tmp_path, monkeypatch):
    import importlib

    state_run = importlib.import_module("dlmlab.studies.state.run")
    res = state_run.run("ladder_smoke", tmp_path, progress=False)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["preset"] == "ladder_smoke" and data["claims"] == []
    titles = [t["title"] for t in data["tables"]]
    assert titles == ["Scale ladder: prefix-task layer profiles", "Scale ladder: accuracy above the learned level",
                      "Scale ladder: runs that learned their task"]
    prof = data["tables"][0]
    assert prof["columns"][1:3] == ["16", "32"]
    assert [r[0] for r in prof["rows"]] == ["lstm/parity late margin", "transformer/parity gradual margin"]
    assert all(cell.endswith("(n=2 seeds, t)") for r in prof["rows"] for cell in r[1:3])
    assert set(data["results"]["trends"]) == {r[0] for t in data["tables"][:2] for r in t["rows"]}
    assert len(data["results"]["runs"]) == 2 * 2 * 2 and all("probes" in r and "ablation" not in r
                                                             for r in data["results"]["runs"])
    for f in data["figures"]:
        assert (tmp_path / f["path"]).stat().st_size > 1000
    assert "scale ladder" in (tmp_path / "report.md").read_text().lower()
    # a rerun trains nothing: every cell is read back
    calls = []
    monkeypatch.setattr(state_run, "run_cell", lambda *a, **k: calls.append(a))
    again = state_run.run("ladder_smoke", tmp_path, progress=False)
    assert calls == [] and [t.rows for t in again.tables] == [t.rows for t in res.tables]
