"""The reversal scale ladder: statistics and trends on built summaries, and a tiny ladder end to end that resumes."""

from __future__ import annotations

import json

import pytest

from dlmlab.config import ConfigError
from dlmlab.models import TransformerConfig
from dlmlab.report.ladder import AWAY, FLAT, TOWARD, trend
from dlmlab.studies.reversal import ladder as L
from dlmlab.studies.reversal.presets import PRESETS, ReversalLadder, ReversalPreset, fixed_pair_task
from dlmlab.tasks.positional_relations import PositionalTaskConfig
from dlmlab.training import TrainConfig
from reversal_summary import KINDS, PES, pair_summary, reversal_summary


def test_ladder_statistics_and_trends_on_built_summaries():
    small = {"summary": reversal_summary(grad={pe: [0.3, 0.35, 0.32] for pe in PES}), "pair_summary": pair_summary()}
    large = {"summary": reversal_summary(grad={pe: [0.8, 0.75, 0.78] for pe in PES}), "pair_summary": pair_summary()}
    transfer, mechanism = L.ladder_stats({32: small, 128: large}, PES, KINDS)
    names = [s.name for s in transfer]
    assert names == ["reverse acc MDM - ARM (learned)", "reverse acc MDM - ARM (rope)", "reverse acc MDM - ARM (alibi)",
                     "reverse p alibi - rope (offset task)", "reverse p alibi - rope (fixed layout)",
                     "reverse p rope - learned (offset task)", "reverse p rope - learned (fixed layout)"]
    by = {s.name: s for s in mechanism}
    cos = by["storage grad cos MDM, once learned (rope)"]
    assert (cos.level, cos.study_value, cos.size_label) == (0.6, 0.6, "d_model")
    # every row carries the study's value where the summary has one: 0.6 (cosine), 1.0 (ALiBi correlation)
    assert by["positional attention corr MDM (alibi)"].study_value == 1.0
    assert by["positional attention corr MDM (rope)"].study_value is None
    assert cos.values[32.0] == [0.3, 0.35, 0.32] and trend(cos).label == TOWARD  # rises past the level
    assert trend(by["positional attention corr MDM (alibi)"]).label in (FLAT, "undetermined")
    # paired differences per seed: MDM - ARM reverse accuracy
    assert transfer[1].values[32.0] == pytest.approx([0.66, 0.55, 0.605])
    back = {"summary": reversal_summary(grad={pe: [0.1, 0.12, 0.11] for pe in PES}), "pair_summary": None}
    _, mech = L.ladder_stats({32: small, 128: back}, PES, KINDS)
    assert trend(mech[0]).label == AWAY
    assert not any("fixed layout" in s.name for s in L.ladder_stats({32: small, 128: back}, PES, KINDS)[0])


def test_the_ladder_preset():
    lad = PRESETS["ladder"]
    assert isinstance(lad, ReversalLadder) and len(lad.widths) in (3, 4)
    assert lad.base.seeds == PRESETS["cpu"].seeds and lad.base.train == PRESETS["cpu"].train  # the cpu recipe
    assert lad.base.task == PRESETS["cpu"].task and lad.base.pair_task == PRESETS["cpu"].pair_task
    assert not lad.base.real.enabled
    with pytest.raises(ConfigError, match="widths"):
        ReversalLadder(base=lad.base, widths=[64])
    with pytest.raises(ConfigError, match="multiple of n_heads"):
        ReversalLadder(base=lad.base, widths=[30, 64])
    with pytest.raises(ConfigError, match="real-data"):
        ReversalLadder(base=PRESETS["cpu"])


def _tiny() -> ReversalLadder:
    base = ReversalPreset(task=PositionalTaskConfig(n_pairs=6, seq_len=12, distances=[1, 2], n_distractors=2),
                          model=TransformerConfig(d_model=8, n_layers=1, n_heads=2),
                          train=TrainConfig(steps=4, batch_size=8, log_every=2, schedule="constant"),
                          positions=["rope", "alibi"], seeds=[0, 1], max_distance=5, device="cpu",
                          pair_task=fixed_pair_task(6))
    return ReversalLadder(base=base, widths=[8, 16])


@pytest.mark.study  # a study run: outside `make test-fast`
def test_tiny_ladder_end_to_end_and_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("DLMLAB_WORKERS", "1")
    cfg = _tiny()
    res = L.run_ladder(cfg, "ladder_tiny", tmp_path, progress=False)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["preset"] == "ladder_tiny" and data["claims"] == []
    titles = [t["title"] for t in data["tables"]]
    assert titles[0].startswith("Scale ladder: reverse transfer") and titles[1].startswith("Scale ladder: storage")
    assert titles[2].startswith("Scale ladder: cost")
    transfer = data["tables"][0]
    assert transfer["columns"][1:3] == ["8", "16"] and "(n=2 seeds, t)" in transfer["rows"][0][1]
    assert {f["path"] for f in data["figures"]} == {"figures/ladder_transfer.png", "figures/ladder_mechanism.png"}
    for f in data["figures"]:
        assert (tmp_path / f["path"]).stat().st_size > 1000
    stats = {s["name"]: s for s in data["results"]["stats"]}
    assert set(stats["storage grad cos MDM, once learned (rope)"]["values"]) == {"8.0", "16.0"}
    assert stats["storage grad cos MDM, once learned (rope)"]["trend"]["label"]
    runs = sorted(p.name for p in (tmp_path / L.RUNS_DIR).glob("*.json"))
    # 2 widths x (2 kinds x 2 PEs + 1 MDM kind x 2 PEs on the pair task) x 2 seeds
    assert len(runs) == 2 * (4 + 2) * 2 and "d8_pair_mdm_rope_s1.json" in runs
    assert len(res.tables) == 3
    # a second run reads every finished run back: nothing trains
    monkeypatch.setattr(L, "run_one", lambda *a, **k: (_ for _ in ()).throw(AssertionError("trained again")))
    again = L.run_ladder(cfg, "ladder_tiny", tmp_path, progress=False)
    same = lambda x: json.dumps(x, sort_keys=True)  # noqa: E731 (NaN != NaN: compare as text; a row can be all NaN)
    assert same(again.results["stats"]) == same(res.results["stats"])
    # a changed recipe does not reuse the stored runs
    calls = []
    monkeypatch.setattr(L, "run_one", lambda *a, **k: calls.append(a) or {})
    import dataclasses

    changed = dataclasses.replace(cfg, base=dataclasses.replace(cfg.base, train=dataclasses.replace(
        cfg.base.train, steps=6)))
    job = L.ladder_jobs(changed, tmp_path, False)[0]
    L.cached_run(*job)
    assert len(calls) == 1


def test_reproduce_reversal_ladder_runs_the_ladder(tmp_path, monkeypatch):
    from dlmlab.studies.reversal import run

    seen = []
    monkeypatch.setattr(L, "run_ladder", lambda cfg, name, out, progress: seen.append((cfg, name, out)) or "done")
    assert run("ladder", tmp_path, progress=False) == "done"
    assert seen[0][0] is PRESETS["ladder"] and seen[0][1] == "ladder" and seen[0][2] == tmp_path
