"""The induction study end to end (smoke preset) and the timestep / emergence analyses."""

import dataclasses
import json

import pytest
import torch

from dlmlab.analysis import emergence, timestep
from dlmlab.config import ConfigError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.studies import load_study
from dlmlab.studies.induction import CLAIM_IDS, PRESETS
from dlmlab.studies.induction.presets import InductionPreset


@pytest.mark.study
def test_smoke_pipeline_writes_everything(study_smoke):
    study = load_study("induction")
    tmp_path, _, res = study_smoke("induction")  # the session's one smoke run (tests/conftest.py)
    assert res["study"] == "induction" and res["preset"] == "smoke"
    assert [c["id"] for c in res["claims"]] == list(CLAIM_IDS)
    for c in res["claims"]:
        assert c["statement"] and isinstance(c["evidence"], dict)
        # holds: a real bool (not 0 / 1) or None, the one the verdict implies (None only when nothing was evaluated)
        assert type(c["holds"]) is bool or c["holds"] is None, (c["id"], c["holds"])
        assert (c["holds"] is True) == (c["verdict"] == "reproduced"), (c["id"], c["verdict"], c["holds"])
        assert c["holds"] is not None or c["reason"] in ("not_run", "precondition"), (c["id"], c["reason"])
    # the seeded smoke run's verdicts (`dlmlab reproduce induction --preset smoke`)
    # (issue 27: every claim now first checks that its model learned induction, which 40 smoke steps never do)
    assert {c["id"]: (c["verdict"], c["reason"]) for c in res["claims"]} == {
        cid: ("inconclusive", "precondition") for cid in CLAIM_IDS}
    fold_ = res["results"]["models"]["dlm_L2"]["fold"]
    assert {"folded_accuracy", "single_scale_folded_accuracy", "accuracy_gap"} <= set(fold_)
    assert "probe_full_range" in res["results"]["models"]["dlm_L2"]
    from dlmlab.studies.induction import fold_check  # the fold's accuracies for trained run folders

    row = fold_check.check(tmp_path / "runs" / "dlm_L2")
    assert row["accuracy"] == pytest.approx(fold_["accuracy"]) and row["step"] == 40
    assert row["folded_accuracy"] == pytest.approx(fold_["folded_accuracy"])
    r2 = next(c for c in res["claims"] if c["id"] == "mask_rate_probe_r2")
    assert r2["evidence"]["value"] == res["results"]["models"]["dlm_L2"]["probe"]["rmse"][1]  # after layer 0's attention
    _check_seed_fields_and_learned(res)
    _check_smoke_numbers(tmp_path, res)
    names = {f["path"] for f in res["figures"]}
    for n in ("attention_patterns", "ablation_heatmap", "context_bars", "probe_r2", "emergence", "local_window",
              "heads_twoways"):
        assert f"figures/{n}.png" in names and (tmp_path / "figures" / f"{n}.png").stat().st_size > 1000
    models = res["results"]["models"]
    assert set(models) == {"ar_L1", "dlm_L1", "ar_L2", "dlm_L2"}
    m = models["dlm_L2"]
    assert len(m["probe"]["r2"]) == 3 and len(m["emergence"]["curve"]) == 2
    n_targets = res["config"]["eval_seqs"] * res["config"]["per_seq"]  # an accuracy is k of these targets, k whole
    assert m["accuracy"]["reverse"]["both"] * n_targets == pytest.approx(round(m["accuracy"]["reverse"]["both"] * n_targets))
    assert models["ar_L2"]["accuracy"]["forward"]["both"] is None
    # the heads measured two ways (masked / unmasked random / unmasked text), over training, and their cost
    assert set(m["heads_twoways"]["summary"]) == {"masked", "random", "text"}
    assert set(models["ar_L2"]["heads_twoways"]["summary"]) == {"random", "text"}  # the AR never sees a mask
    assert len(m["heads_twoways"]["summary"]["random"]["induction"]["curve"]) == 2
    cost = res["results"]["heads_twoways_cost"]
    assert 0 < cost["seconds"] < cost["analyse_seconds"] and 0 < cost["fraction_of_jobs"] < cost["fraction_of_analysis"]
    # the cost is the models' own recorded seconds, summed
    tw = sum(x["heads_twoways"]["seconds"] for x in models.values())
    train_s, analyse_s = (sum(x["train"][k] for x in models.values()) for k in ("seconds", "analyse_seconds"))
    assert cost == pytest.approx({"seconds": tw, "train_seconds": train_s, "analyse_seconds": analyse_s,
                                  "fraction_of_jobs": tw / (train_s + analyse_s), "fraction_of_analysis": tw / analyse_s})
    assert "Heads measured two ways" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "report.md").read_text().startswith("# Induction")
    # a second run reuses the trained checkpoints
    study.run("smoke", tmp_path, progress=False)
    assert json.loads((tmp_path / "results.json").read_text())["results"]["models"]["dlm_L2"]["accuracy"] == m["accuracy"]


def _check_seed_fields_and_learned(res):
    """Issue 34: every claim cites its summary line (or is an extension), says it in words, carries the key
    study_effect; and no claim is reproduced unless every model of depth >= 2 (every seed) learned induction."""
    from dlmlab.report.claims import learned_level

    for c in res["claims"]:
        assert c["seed_ref"] or c["extension"], c["id"]
        assert c["seed_says"] and "study_effect" in c, c["id"]
    assert [c["id"] for c in res["claims"] if c["extension"]] == ["mask_rate_steering"]
    runs = [r for m in res["results"]["models"].values() for r in [m, *m["seed_runs"]] if r["n_layers"] >= 2]
    assert len(runs) == 4  # ar_L2, dlm_L2: 2 training seeds each
    head = {"ar": ("forward", "left"), "dlm": ("forward", "both")}
    all_learned = all(r["accuracy"][head[r["objective"]][0]][head[r["objective"]][1]] >= learned_level(r["chance"])
                      for r in runs)
    for c in res["claims"]:
        assert c["verdict"] != "reproduced" or all_learned, (c["id"], "reproduced by models that did not learn")
        if not all_learned and c["id"] != "mask_rate_steering":  # the precondition is shown in the detail
            assert c["reason"] == "precondition" and "learned level" in c["detail"], (c["id"], c["detail"])


def _check_smoke_numbers(out, res):
    """Each number the claims report equals its recomputation from the run's own stored measurements, and each
    verdict is the one report.claims' learned-level precondition gives for those measurements."""
    import math
    import re

    import numpy as np

    from dlmlab.report.claims import learned_level
    from dlmlab.studies.induction.claims import all_claims
    from value_util import assert_claims_equal

    models = res["results"]["models"]
    for key, m in models.items():
        vocab = json.loads((out / "runs" / key / "run_config.json").read_text())["text_vocab"]
        assert m["chance"] == 1.0 / vocab, key  # random_ids: text -> chance = 1 / text vocabulary
        for d, by_ctx in m.get("accuracy_per_seq", {}).items():  # headline accuracies: the per-sequence means
            for ctx, per_seq in by_ctx.items():
                assert m["accuracy"][d][ctx] == pytest.approx(sum(per_seq) / len(per_seq), abs=1e-12), (key, d, ctx)
    ar, dlm = models["ar_L2"], models["dlm_L2"]
    head = {"ar": lambda x: x["accuracy"]["forward"]["left"], "dlm": lambda x: x["accuracy"]["forward"]["both"]}
    claims = {c["id"]: c for c in res["claims"]}
    # the preconditions: every "<model> forward accuracy a < learned level l (chance c)" quotes the recomputed numbers
    # and is true of them; a claim is inconclusive / precondition exactly because such a model did not learn
    pat = re.compile(r"(\w+_L\d(?:_s\d)?) forward accuracy ([\d.]+) < learned level ([\d.]+) \(chance ([\d.]+)\)")
    for cid, c in claims.items():
        if cid == "mask_rate_steering":
            continue  # judged during decoding, from its random-control draws (below)
        found = pat.findall(c["detail"])
        assert found and c["reason"] == "precondition", (cid, c["detail"])
        for key, acc, level, chance in found:  # seed s > 0 of a model: "<model>_s<s>"
            mm = models[key[:-3]]["seed_runs"][int(key[-1]) - 1] if "_s" in key else models[key]
            a = head[mm["objective"]](mm)
            assert (acc, level, chance) == (f"{a:.3f}", f"{learned_level(mm['chance']):.3f}", f"{mm['chance']:.3f}")
            assert a < learned_level(mm["chance"]), (cid, key)
    # the evidence: the stored measurements, and what follows from them
    ev = {cid: c["evidence"] for cid, c in claims.items()}
    e = ev["dlm_beats_ar_with_both_sides"]
    assert (e["L2_distinct_ids_ar_forward"], e["L2_distinct_ids_dlm_both_forward"]) == (head["ar"](ar), head["dlm"](dlm))
    assert e["L2_few_ids_ar_forward"] == {k: v["accuracy"] for k, v in ar["few_ids"].items()}
    assert set(ar["few_ids"]) == {"3", "6"} and len(ar["few_ids"]["3"]["per_seq"]) == res["config"]["eval_seqs"]
    assert ev["left_only_not_better_than_ar"]["L2_dlm_left_forward"] == dlm["accuracy"]["forward"]["left"]
    for d in ("forward", "reverse"):
        g = dlm["gains"][d]
        e = ev["both_approx_left_plus_right"]
        assert [e[f"L2_{d}_gain_{s}"] for s in ("left", "right", "both")] == [g["left"], g["right"], g["both"]]
        assert e[f"L2_{d}_ratio"] == pytest.approx(g["both"] / (g["left"] + g["right"]), rel=1e-12)
    e = ev["two_layers_needed"]
    assert (e["ar_L1"], e["dlm_L1"]) == (head["ar"](models["ar_L1"]), head["dlm"](models["dlm_L1"]))
    assert (e["ar_best_deep"], e["dlm_best_deep"]) == (head["ar"](ar), head["dlm"](dlm))  # L2: the only deep model
    e = ev["prev_and_next_token_heads_in_layer0"]
    for kind in ("prev", "next"):  # the best layer-0 head and its score
        layer0 = dlm[f"{kind}_token_scores"][0]
        assert (e[f"L2_{kind}_head"], e[f"L2_{kind}_score"]) == (int(np.argmax(layer0)), max(layer0))
        assert e[f"L2_init_best_{kind}"] == max(dlm[f"{kind}_token_scores_init"][0])
        assert e[f"L2_text_{kind}_score"] == max(dlm[f"{kind}_token_scores_text"][0])
        curve = dlm["emergence"]["curves"][f"{kind}_layer0"]
        best = max(range(len(curve)), key=lambda i: curve[i][1])
        assert (e[f"L2_peak_{kind}_over_training"], e[f"L2_peak_{kind}_step"]) == (curve[best][1], curve[best][0])
    e, probe = ev["mask_rate_probe_r2"], dlm["probe"]
    assert (e["L2_r2"], e["L2_embed_r2"], e["L2_shuffled_label_r2"], e["L2_pooled_r2"]) == (
        probe["r2"][1], probe["r2"][0], probe["r2_control"][1], probe["r2_pooled"][1])
    assert (e["L2_rmse"], e["L2_shuffled_label_rmse"]) == (probe["rmse"][1], probe["rmse_control"])
    assert e["L2_full_range_r2"] == dlm["probe_full_range"]["r2"][1] and e["L2_t_range"] == probe["t_range"]
    # the patch against its random control: the permutation p-value, median and 95th percentile recomputed
    patch = dlm["patch"]
    draws, value = patch["random_deltas"], patch["delta"]
    assert len(draws) == patch["control"]["n_draws"] == ev["mask_rate_patch_raises_entropy"]["L2_n_random"]
    assert patch["control"]["p"] == pytest.approx((1 + sum(x >= value for x in draws)) / (1 + len(draws)), abs=1e-15)
    assert patch["control"]["control_median"] == pytest.approx(float(np.median(draws)), abs=1e-15)
    assert patch["random_p95"] == patch["control"]["control_p95"] == pytest.approx(float(np.percentile(draws, 95)))
    e = ev["mask_rate_patch_raises_entropy"]
    assert (e["L2_delta_entropy"], e["L2_random_p95"], e["L2_entropy_clean"]) == (
        value, patch["random_p95"], patch["entropy_clean"])
    lw, e = dlm["local_window"], ev["local_window_sensitivity"]
    assert e["L2_target_only"] == lw["none"]
    for k in ("pm1", "pm2_only", "pm1_pm2", "far2"):
        assert e[f"L2_drop_{k}"] == pytest.approx(lw["none"] - lw[k], abs=1e-12), k
    e = ev["q_and_k_composition_in_induction_heads"]
    assert (e["L2_accuracy"], e["L2_folded_accuracy"]) == (dlm["fold"]["accuracy"], dlm["fold"]["folded_accuracy"])
    li, hi_ = dlm["top_induction_head"]
    assert e["L2_induction_head"] == f"L{li}H{hi_}"
    deep = dlm["induction_scores"][1]  # the induction head: the best-scoring head of layers >= 1 (here: layer 1)
    assert dlm["top_induction_head"] == [1, int(np.argmax(deep))]
    # emergence: the largest increase between checkpoints of the (flat) accuracy curve
    em = dlm["emergence"]
    ys = [y for _, y in em["curve"]]
    assert em["largest_increase"] == max(b - a for a, b in zip(ys, ys[1:])) and em["final"] == ys[-1]
    assert (em["start"], em["max"]) == (ys[0], max(ys))
    # steering: each p-value is the permutation p-value of its draws, and a measure that no draw moves is a
    # precondition failure (report.claims.verdict_from_control)
    st = ev["mask_rate_steering"]
    assert st["p_add_tokens_per_step"] == st["p_remove_tokens_per_step"] == 1.0  # every draw ties the value
    assert claims["mask_rate_steering"]["reason"] == "precondition" and "nothing moves it" in \
        claims["mask_rate_steering"]["detail"]
    assert math.isfinite(st["p_add_entropy"]) and st["n_random"] == 200
    # and the claims as a whole: the current definitions, re-judged from the stored measurements alone
    assert_claims_equal(res["claims"], all_claims(models), ids=[c for c in claims if c != "mask_rate_steering"])


def test_presets_validate_and_reject_bad_values():
    for p in PRESETS.values():
        p.validate()
    assert PRESETS["paper"].d_model == 512 and PRESETS["paper"].n_heads == 16 and PRESETS["paper"].seq_len == 512
    assert PRESETS["paper"].depths == [1, 2, 3]
    with pytest.raises(ConfigError, match="seq_len"):
        InductionPreset(seq_len=63).validate()
    with pytest.raises(ConfigError, match="n_random"):
        InductionPreset(n_random=8).validate()
    with pytest.raises(ConfigError, match="t_min"):
        InductionPreset(t_min=0.6, t_max=0.5).validate()
    with pytest.raises(ConfigError, match="patch_low"):
        InductionPreset(patch_low=0.9, patch_high=0.5).validate()
    with pytest.raises(ValueError, match="unknown preset"):
        load_study("induction").run("huge", "/tmp/never")


def test_dlm_training_mask_rates_stay_in_the_preset_range(monkeypatch):
    """The DLM batches carry t in [t_min, t_max] (antithetic: spread over the whole range)."""
    from dlmlab.studies.induction import train as tr

    p = dataclasses.replace(PRESETS["smoke"], t_min=0.1, t_max=0.4, steps=3, text_steps=0)
    seen = []

    def fake_train(model, cfg, batches, objective, **kw):  # the batches train() would make at steps 1..3
        for s in range(1, 4):
            g = torch.Generator().manual_seed(s)
            seen.append(objective.make_batch(batches(s, g), g, step=s)["t"])
        return []

    monkeypatch.setattr(tr, "train", fake_train)
    tr.train_model(p, tr.load_data(p), 1, "dlm", None, progress=False)
    t = torch.cat(seen)
    assert t.min() >= 0.1 and t.max() <= 0.4 and t.max() - t.min() > 0.2


def tiny_dlm():
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=12, d_model=16, n_layers=2, n_heads=2, attn_mask="bidirectional",
                                         max_seq_len=16)).eval()


def test_mask_rate_probe_and_patch_shapes():
    m = tiny_dlm()
    x = torch.randint(0, 11, (32, 16), generator=torch.Generator().manual_seed(0))
    rep = timestep.mask_rate_probe(m, x, mask_id=11)
    assert rep.points == ["blocks.0.resid_pre", "blocks.0.resid_post", "blocks.1.resid_post"]
    assert len(rep.r2) == 3 and all(r <= 1 for r in rep.r2) and rep.directions[0].shape == (16,)
    pt = timestep.patch_mask_rate(m, x, 11, rep.points[1], rep.directions[1])
    # the clean entropy recomputed in float64 at the positions the seeded generator masks at rate low = 0.15
    from value_util import entropy_no_mask_f64

    masked = torch.rand(x.shape, generator=torch.Generator().manual_seed(0)) < 0.15
    with torch.no_grad():
        logits = m(torch.where(masked, torch.full_like(x, 11), x))
    want = [entropy_no_mask_f64(logits[b, t], 11) for b, t in masked.nonzero().tolist()]
    assert pt["n_masked"] == len(want) > 0 and pt["entropy_clean"] == pytest.approx(sum(want) / len(want), rel=1e-5)
    assert pt["delta"] == pt["entropy_patched"] - pt["entropy_clean"]
    assert pt["delta"] != 0.0  # the patch changes the masked predictions
    with pytest.raises(ValueError, match="low"):
        timestep.patch_mask_rate(m, x, 11, rep.points[1], rep.directions[1], low=0.9, high=0.5)
    with pytest.raises(ValueError, match="t_range"):
        timestep.mask_rate_probe(m, x, mask_id=11, t_range=(0.5, 0.2))
    narrow = timestep.mask_rate_probe(m, x, mask_id=11, t_range=(0.1, 0.3))
    assert narrow.r2 != rep.r2  # the probe data follow the range


class _SquaredLogits:
    """A toy objective: the mean squared logit of the clean tokens (only the weights' movement matters here)."""

    name = "squared_logits"

    def make_batch(self, tokens, gen, step=0, **extra):
        return {"x": tokens}

    def loss(self, model, batch):
        return (model(batch["x"]) ** 2).mean(), {}

    def to_card(self):
        return {"name": self.name}


def test_jump_step_and_checkpoint_curve(tmp_path):
    j = emergence.jump_step([(100, 0.0), (200, 0.05), (300, 0.7), (400, 0.9)])
    assert j["largest_increase_step"] == 300 and j["midpoint_step"] == 300 and j["final"] == 0.9
    flat = emergence.jump_step([(1, 0.2), (2, 0.2)])
    assert flat["midpoint_step"] is None and flat["largest_increase_step"] is None
    from dlmlab.training import TrainConfig, train

    m = tiny_dlm()
    cfg = TrainConfig(steps=4, batch_size=4, ckpt_every=2, keep_checkpoints=0, progress=False, log_every=1)
    train(m, cfg, lambda s, g: torch.randint(0, 11, (4, 16), generator=g), _SquaredLogits(), out_dir=tmp_path)
    curve = emergence.checkpoint_curve(m, tmp_path, lambda mm: float(mm.tok_emb.weight.detach().sum()))
    assert [s for s, _ in curve] == [2, 4] and curve[0][1] != curve[1][1]
    with pytest.raises(FileNotFoundError):
        emergence.checkpoint_curve(m, tmp_path / "none", lambda mm: 0.0)


def test_mask_range_sweep_prints_one_row_per_range(tmp_path, capsys):
    from dlmlab.studies.induction import sweep

    out = tmp_path / "rows.json"
    assert sweep.main(["--preset", "smoke", "--ranges", "0.001:1", "0.1:0.5", "--no-progress", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["t_min"], r["t_max"]) for r in rows] == [(0.001, 1.0), (0.1, 0.5)]
    assert all(0.0 <= r["forward"] <= 1.0 and 0.0 <= r["reverse"] <= 1.0 for r in rows)
    # each accuracy is k of the preset's eval_seqs * per_seq targets (k whole), and the seeded sweep repeats itself
    n = PRESETS["smoke"].eval_seqs * PRESETS["smoke"].per_seq
    assert all(r[d] * n == pytest.approx(round(r[d] * n), abs=1e-9) for r in rows for d in ("forward", "reverse"))
    again = tmp_path / "again.json"
    assert sweep.main(["--preset", "smoke", "--ranges", "0.001:1", "--no-progress", "--json", str(again)]) == 0
    untimed = lambda rs: [{k: v for k, v in r.items() if k != "seconds"} for r in rs]  # noqa: E731
    assert untimed(json.loads(again.read_text())) == untimed(rows[:1])
    assert "| [0.1, 0.5] |" in capsys.readouterr().out
    assert sweep.main(["--preset", "smoke", "--ranges", "0.5:0.1"]) == 2
    assert sweep.main(["--preset", "smoke", "--ranges", "half"]) == 2
    assert "T_MIN:T_MAX" in capsys.readouterr().err
