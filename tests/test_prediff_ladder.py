"""The PreDiff scale ladder: presets, statistics over sizes, the report it writes (fake measurements), and one
real tiny ladder (slow)."""

import dataclasses
import json
import math

import pytest

from dlmlab.report.ladder import AWAY, FLAT, TOWARD
from dlmlab.studies.prediff import ladder as L
from dlmlab.studies.prediff.presets import PRESETS


def test_ladder_presets():
    lad = L.LADDERS["ladder"]
    lad.validate()
    assert 3 <= len(lad.sizes) <= 4 and len(lad.recipe.seeds) >= 3
    # one recipe: the cpu preset's unchanged (issue 34: never less training than the preset it extends); the cpu
    # backbone is one of the sizes
    cpu = PRESETS["cpu"]
    assert lad.extends == "cpu" and lad.recipe == cpu
    assert any((s.d_model, s.n_layers, s.d_mlp) == (cpu.model.d_model, cpu.model.n_layers, cpu.model.d_mlp)
               for s in lad.sizes)
    L.LADDERS["ladder_smoke"].validate()
    with pytest.raises(Exception, match="sizes"):
        L.PreDiffLadder(lad.recipe, lad.sizes[:1]).validate()
    # a ladder that trains less than the preset it extends is refused, whatever it would cost
    short = dataclasses.replace(cpu, adapt=dataclasses.replace(cpu.adapt, steps=300))
    with pytest.raises(Exception, match="never trains less than the preset it extends: adapt.steps 300 < cpu's 500"):
        L.PreDiffLadder(short, lad.sizes).validate()
    with pytest.raises(Exception, match="number of seeds 2 < cpu's 3"):
        L.PreDiffLadder(dataclasses.replace(cpu, seeds=[0, 1]), lad.sizes).validate()
    smoke = L.LADDERS["ladder_smoke"]
    assert smoke.extends == "smoke" and smoke.recipe.adapt == PRESETS["smoke"].adapt


def _cmp(a, b, per_seed):
    lo, hi = min(per_seed) - 0.1, max(per_seed) + 0.1
    return {"a": a, "b": b, "mean": sum(per_seed) / len(per_seed), "lo": lo, "hi": hi, "per_seed": per_seed, "n": 3,
            "unit": "seeds", "method": "t", "n_seeds": 3, "n_windows": 8, "holds": hi < 0}


def _measured(params, hybrid):
    comps = {"hybrid_vs_uniform_bidir": _cmp("prediff", "uniform_bidir", hybrid),
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
    assert hyb.side == -1 and hyb.study_value == pytest.approx(math.log(28.7 / 34.1)) and L.trend(hyb).label == TOWARD
    # combined - attention only sits at -0.22, below the study's log(26.9 / 28.7) = -0.065: toward the study is up,
    # so a gap that widens with size moves away from the study, not toward the claim's level
    comb = stats["combined - attention only NLL (attn_obj - prediff)"]
    assert comb.side == +1 and L.trend(comb).label == FLAT  # the same values at both sizes
    wider = {1000: _measured(1000, [0.0] * 3), 8000: _measured(8000, [0.0] * 3)}
    wider[8000]["comparisons"]["combined_vs_attention_only"] = _cmp("attn_obj", "prediff", [-0.5, -0.55, -0.52])
    comb = {s.name: s for s in L.ladder_stats(wider)}["combined - attention only NLL (attn_obj - prediff)"]
    assert L.trend(comb).label == AWAY
    assert L.toward_study_side({1: [0.1, 0.2]}, None) == -1 and L.toward_study_side({1: [0.1, 0.2]}, 0.5) == 1
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
    assert verdicts[0][0] == "hybrid_beats_uniform_bidirectional"
    assert verdicts[0][1:] == ["inconclusive (effect excluded)", "inconclusive (underpowered)"]
    # compose: attn_obj - diffugpt spans 0 and excludes the study's log(26.9 / 42.8) at both sizes
    assert verdicts[1][1:] == ["inconclusive (effect excluded)"] * 2
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
