"""The PreDiff scale ladder: presets, statistics over sizes, the report it writes (fake measurements), and one
real tiny ladder (slow)."""

import dataclasses
import json

import pytest

from dlmlab.report.ladder import AWAY, TOWARD
from dlmlab.studies.prediff import ladder as L
from dlmlab.studies.prediff.presets import PRESETS


def test_ladder_presets():
    lad = L.LADDERS["ladder"]
    lad.validate()
    assert 3 <= len(lad.sizes) <= 4 and len(lad.recipe.seeds) >= 3
    # one recipe: the cpu preset's, with a shorter adaptation budget; the cpu backbone is one of the sizes
    cpu = PRESETS["cpu"]
    assert dataclasses.replace(lad.recipe, adapt=cpu.adapt) == cpu
    assert any((s.d_model, s.n_layers, s.d_mlp) == (cpu.model.d_model, cpu.model.n_layers, cpu.model.d_mlp)
               for s in lad.sizes)
    L.LADDERS["ladder_smoke"].validate()
    with pytest.raises(Exception, match="sizes"):
        L.PreDiffLadder(lad.recipe, lad.sizes[:1]).validate()


def _cmp(a, b, per_seed):
    lo, hi = min(per_seed) - 0.1, max(per_seed) + 0.1
    return {"a": a, "b": b, "mean": sum(per_seed) / len(per_seed), "lo": lo, "hi": hi, "per_seed": per_seed, "n": 3,
            "unit": "seeds", "method": "t", "n_seeds": 3, "n_windows": 8, "holds": hi < 0}


def _measured(params, hybrid):
    comps = {"hybrid_vs_uniform_bidir": _cmp("prediff", "uniform_bidir", hybrid),
             "hybrid_vs_uniform_bidir_shifted": _cmp("attn_obj", "diffugpt", [0.01, 0.02, 0.0]),
             "combined_vs_attention_only": _cmp("attn_obj", "prediff", [-0.2, -0.25, -0.22]),
             "combined_vs_objective_only": _cmp("attn_obj", "diffugpt", [0.01, 0.02, 0.0]),
             "ar_control_vs_best_diffusion": _cmp("ar_control", "attn_obj", [-0.5, -0.6, -0.55])}
    return {"params": params, "seconds": 1.0, "data": {"unigram_nll": 6.0}, "budget": 400, "threshold": None,
            "comparisons": comps, "methods": {m: {"val_nll": 4.0} for m in
                                              ("prediff", "uniform_bidir", "attn_obj", "diffugpt", "ar_control")}}


def test_ladder_stats_and_trend():
    by_size = {1000: _measured(1000, [0.0, 0.01, -0.01]), 8000: _measured(8000, [-0.1, -0.12, -0.11])}
    stats = {s.name: s for s in L.ladder_stats(by_size)}
    hyb = stats["hybrid - uniform NLL (prediff - uniform_bidir)"]
    assert hyb.side == -1 and hyb.study_value == -0.17 and L.trend(hyb).label == TOWARD
    assert stats["hybrid - uniform NLL, shifted (attn_obj - diffugpt)"].study_value is None
    assert not any("steps" in n for n in stats)  # no threshold comparison measured: no statistic
    worse = {1000: _measured(1000, [-0.1, -0.12, -0.11]), 8000: _measured(8000, [0.0, 0.01, -0.01])}
    assert L.trend(L.ladder_stats(worse)[0]).label == AWAY


def test_ladder_report_from_fake_measurements(tmp_path, monkeypatch):
    sizes = iter([(1000, [0.0, 0.01, -0.01]), (8000, [-0.1, -0.12, -0.11])])

    def fake(p, out, progress):
        params, hyb = next(sizes)
        return _measured(params, hyb)

    monkeypatch.setattr(L, "measure_size", fake)
    L.run_ladder("ladder_smoke", tmp_path, progress=False)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["preset"] == "ladder_smoke" and data["claims"] == []
    titles = [t["title"] for t in data["tables"]]
    assert titles[0].startswith("PreDiff comparisons over backbone size") and "Claim verdicts per size" in titles
    row = data["tables"][0]["rows"][0]
    assert "(n=3 seeds, t)" in row[1] and row[-1].startswith(TOWARD)
    verdicts = data["tables"][1]["rows"]
    assert verdicts[0][0] == "hybrid_beats_uniform_bidirectional"  # the shifted part spans 0 at both sizes
    assert verdicts[0][1:] == ["inconclusive (effect excluded)", "inconclusive (underpowered)"] and verdicts[1][1:] == ["inconclusive (underpowered)"] * 2
    assert (tmp_path / data["figures"][0]["path"]).exists()
    assert data["results"]["trends"]["hybrid - uniform NLL (prediff - uniform_bidir)"]["label"] == TOWARD


@pytest.mark.slow
def test_tiny_ladder_end_to_end_and_resumes(tmp_path):
    from dlmlab.studies.prediff import run

    run("ladder_smoke", tmp_path, progress=False)
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["results"]["sizes"]) == 2 and data["tables"][0]["rows"]
    first = {k: v["comparisons"] for k, v in data["results"]["sizes"].items()}
    run("ladder_smoke", tmp_path, progress=False)  # a re-run reuses every size's measurements
    again = json.loads((tmp_path / "results.json").read_text())
    assert {k: v["comparisons"] for k, v in again["results"]["sizes"].items()} == first
