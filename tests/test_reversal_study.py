"""The reversal study end to end (smoke preset) and its presets."""

import dataclasses
import re
import json

import pytest

from dlmlab.config import ConfigError, from_dict
from dlmlab.studies import load_study
from dlmlab.studies.reversal import PRESETS, ReversalPreset, run

from dlmlab.report.claims import learned_level
from dlmlab.studies.reversal.seeds import SEED_REFS

CLAIMS = {"arm_fails_reverse", "mdm_transfers_reverse", "pe_ordering", "pe_ordering_fixed_layout",
          "attention_correlation_positive", "gradient_alignment_positive"}
# {claim: (verdict, reason)} of the seeded smoke run (200 steps): the learned-PE MDM has not learned the forward
# facts (precondition); on the fixed-layout task ALiBi's reverse p sits a hair below RoPE's on every seed; RoPE's
# positional correlation is positive but below the 0.5 level
SMOKE_VERDICTS = {"arm_fails_reverse": ("reproduced", None), "mdm_transfers_reverse": ("reproduced", None),
                  "pe_ordering": ("inconclusive", "precondition"),
                  "pe_ordering_fixed_layout": ("contradicted", None),
                  "attention_correlation_positive": ("contradicted", None),
                  "gradient_alignment_positive": ("reproduced", None)}


@pytest.fixture(scope="module")
def smoke(study_smoke):
    return study_smoke("reversal")[0]  # the session's one reversal smoke run (tests/conftest.py)


@pytest.mark.study  # a study run: outside `make test-fast`
def test_smoke_outputs(smoke):
    data = json.loads((smoke / "results.json").read_text())
    assert data["study"] == "reversal" and data["preset"] == "smoke"
    claims = {c["id"]: c for c in data["claims"]}
    assert CLAIMS <= set(claims)
    for c in claims.values():
        assert set(c) == {"id", "statement", "holds", "verdict", "reason", "detail", "evidence", "seed_ref",
                          "seed_says", "study_effect", "deviation", "extension"}
        assert c["evidence"], c["id"]
        # issue 34: every claim cites its summary sentence (or is an extension), in our words, with the study's number
        assert (c["seed_ref"] or c["extension"]) and c["seed_says"], c["id"]
        assert c["seed_ref"] == SEED_REFS[c["id"]].ref and c["study_effect"] == SEED_REFS[c["id"]].study_effect
        # a real bool (not 0 / 1) or None, and the one the verdict implies: True exactly when reproduced, None only
        # when nothing was evaluated (not run, or a precondition that left nothing to test)
        assert type(c["holds"]) is bool or c["holds"] is None, (c["id"], c["holds"])
        assert (c["holds"] is True) == (c["verdict"] == "reproduced"), (c["id"], c["verdict"], c["holds"])
        assert c["holds"] is not None or c["reason"] in ("not_run", "precondition"), (c["id"], c["reason"])
    # the seeded smoke run's verdicts (`dlmlab reproduce reversal --preset smoke`)
    assert {k: (c["verdict"], c["reason"]) for k, c in claims.items()} == SMOKE_VERDICTS
    # issue 34: a claim is reproduced only where every model it reads learned the forward facts, and it shows so
    for c in claims.values():
        if c["verdict"] == "reproduced":
            worst = {k: v for k, v in c["evidence"].items() if k.startswith("forward_acc_worst_")}
            assert worst and min(worst.values()) >= c["evidence"]["learned_level"], (c["id"], worst)
    # the robust claims of the study
    assert claims["arm_fails_reverse"]["holds"] is True, claims["arm_fails_reverse"]
    assert claims["mdm_transfers_reverse"]["holds"] is True, claims["mdm_transfers_reverse"]
    for f in data["figures"]:
        assert (smoke / f["path"]).stat().st_size > 1000
    names = {f["path"] for f in data["figures"]}
    assert {"figures/attention_correlation.png", "figures/gradient_cosine.png",
            "figures/reverse_probability.png"} <= names
    table = data["tables"][0]
    assert table["columns"][:4] == ["model", "positions", "forward acc", "reverse acc"]
    p = PRESETS["smoke"]
    assert len(table["rows"]) == len(p.kinds) * len(p.positions)
    runs = data["results"]["runs"]
    assert len(runs) == len(p.kinds) * len(p.positions) * len(p.seeds)
    assert all(r["history"][0]["step"] == 0 and r["history"][-1]["step"] == p.train.steps for r in runs)
    report = (smoke / "report.md").read_text()
    assert "reverse acc" in report and "arm_fails_reverse" in report


def _run_values(run: dict, distances) -> dict[str, float]:
    """The per-run numbers the summary rests on, recomputed from the run's own record (plain float64 loops)."""
    h, d = run["history"], run["diagnostics"]
    v = {k: float(run["final"][k]) for k in ("fwd_acc", "rev_acc", "rev_p")}
    v["initial_rev_p"] = float(run["initial_rev_p"])
    v["storage_grad_cos_init"] = float(h[0]["storage_grad_cos"])
    need = learned_level(run["chance"])
    at = next((row["step"] for row in h if row["fwd_acc"] >= need), None)  # first logged step that learned
    after = [float(row["storage_grad_cos"]) for row in h if at is not None and row["step"] >= at]
    v["storage_grad_cos_learned"] = sum(after) / len(after) if after else float("nan")
    for key, col in (("rev_auc", "rev_p"), ("storage_grad_cos_mean", "storage_grad_cos"), ("grad_cos_mean", "grad_cos")):
        v[key] = sum(float(row[col]) for row in h) / len(h)
    if "positional_corr" in d:  # the MDM's diagnostics (the ARM has no query -> B attention to correlate)
        v["positional_corr"] = float(d["positional_corr"])
    if distances and "corr_by_distance" in d:
        by = [float(d["corr_by_distance"][str(k)]) for k in distances if str(k) in d["corr_by_distance"]]
        by = [x for x in by if x == x]
        v["score_corr_train"] = sum(by) / len(by)
    return v


def _groups(runs: list[dict], distances) -> dict[tuple[str, str], dict[str, list[float]]]:
    """{(kind, pe): {metric: [per seed, seeds ascending]}} recomputed from the runs."""
    out: dict = {}
    for r in sorted(runs, key=lambda r: r["seed"]):
        for k, x in _run_values(r, distances).items():
            out.setdefault((r["kind"], r["positions"]), {}).setdefault(k, []).append(x)
    return out


def _nan(x):
    """JSON's null back to NaN (results.json writes a NaN, e.g. a cosine of a model that never learned, as null)."""
    if isinstance(x, dict):
        return {k: _nan(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_nan(v) for v in x]
    return float("nan") if x is None else x


def _minus(a: list[float], b: list[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=True)]


@pytest.mark.study
def test_smoke_numbers_are_recomputed_from_the_runs(smoke):
    """Every interval of every claim equals the Student-t interval (recomputed here in float64) of the per-seed values
    recomputed from the stored runs, and every verdict is the one report.claims' rules give for those intervals and
    the forward-accuracy preconditions."""
    from dlmlab.report.claims import (REPRODUCED, combine, contradicted, learned_level, precondition_failed,
                                      verdict_from_interval)
    from value_util import assert_interval, same, t_interval
    from dlmlab.studies.reversal.summary import BOUNDED

    data = json.loads((smoke / "results.json").read_text())
    res, cfg = data["results"], data["config"]
    seeds = sorted(cfg["seeds"])
    G = _groups(res["runs"], cfg["task"]["distances"])
    P = _groups(res["pair"]["runs"], None)
    # the summaries: per-seed values and their intervals
    for summ, groups in ((res["summary"], G), (res["pair"]["summary"], P)):
        assert set(summ) == {f"{k}/{pe}" for k, pe in groups}
        for (kind, pe), vals in groups.items():
            entry = summ[f"{kind}/{pe}"]
            assert entry["seeds"] == seeds
            for key, x in vals.items():
                assert same(_nan(entry["values"][key]), x), (kind, pe, key)
                assert_interval(_nan(entry["ci"][key]), x, bounds=(0, 1) if key in BOUNDED else None)
    chance, pair_chance = res["chance"], res["pair"]["chance"]
    assert chance == res["runs"][0]["chance"] and pair_chance == res["pair"]["runs"][0]["chance"]
    pes, order = cfg["positions"], [pe for pe in ("alibi", "rope", "learned") if pe in cfg["positions"]]

    def learned(groups, kind, pe, ch):
        return min(groups[kind, pe]["fwd_acc"]) >= learned_level(ch)

    def vfi(x, level=0.0, effect=None):
        _, lo, hi, _ = t_interval(x)
        return verdict_from_interval(lo, hi, level=level, study_effect=effect)

    want_ev: dict[str, dict[str, list[float]]] = {c: {} for c in CLAIMS}
    parts: dict[str, list] = {c: [] for c in CLAIMS}
    for pe in pes:
        arm, mdm = G["arm", pe], G["mdm", pe]
        want_ev["arm_fails_reverse"] |= {f"forward_acc_{pe}": arm["fwd_acc"], f"reverse_acc_{pe}": arm["rev_acc"]}
        lo = t_interval(arm["rev_acc"])[1]
        parts["arm_fails_reverse"].append(
            precondition_failed() if not learned(G, "arm", pe, chance) else contradicted() if lo > chance else REPRODUCED)
        rise, vs = _minus(mdm["rev_p"], mdm["initial_rev_p"]), _minus(mdm["rev_p"], arm["rev_p"])
        want_ev["mdm_transfers_reverse"] |= {f"reverse_p_rise_{pe}": rise, f"reverse_p_mdm_minus_arm_{pe}": vs}
        want_ev["attention_correlation_positive"] |= {f"positional_corr_{pe}": mdm["positional_corr"],
                                                      f"full_score_corr_{pe}": mdm["score_corr_train"]}
        want_ev["gradient_alignment_positive"] |= {f"mdm_storage_grad_cos_learned_{pe}": mdm["storage_grad_cos_learned"],
                                                   f"mdm_storage_grad_cos_init_{pe}": mdm["storage_grad_cos_init"],
                                                   f"mdm_storage_grad_cos_all_steps_{pe}": mdm["storage_grad_cos_mean"],
                                                   f"mdm_wv_wo_grad_cos_{pe}": mdm["grad_cos_mean"],
                                                   f"arm_storage_grad_cos_{pe}": arm["storage_grad_cos_mean"]}
        if pe in ("rope", "alibi"):
            pre = None if learned(G, "mdm", pe, chance) else precondition_failed()
            pre_arm = pre or (None if learned(G, "arm", pe, chance) else precondition_failed())
            parts["mdm_transfers_reverse"] += [pre or vfi(rise), pre_arm or vfi(vs)]
            parts["attention_correlation_positive"].append(
                pre or vfi(mdm["positional_corr"], 0.5, 1.0 if pe == "alibi" else None))
            parts["gradient_alignment_positive"].append(pre or vfi(mdm["storage_grad_cos_learned"], 0.6, 0.6))
    for cid, groups, ch in (("pe_ordering", G, chance), ("pe_ordering_fixed_layout", P, pair_chance)):
        for a, b in zip(order, order[1:]):
            ga, gb = groups["mdm", a], groups["mdm", b]
            dp = _minus(ga["rev_p"], gb["rev_p"])
            want_ev[cid] |= {f"reverse_p_{a}_minus_{b}": dp, f"reverse_acc_{a}_minus_{b}": _minus(ga["rev_acc"], gb["rev_acc"]),
                             f"reverse_p_auc_{a}_minus_{b}": _minus(ga["rev_auc"], gb["rev_auc"])}
            ok = learned(groups, "mdm", a, ch) and learned(groups, "mdm", b, ch)
            # both transfer (reverse accuracy at the learned level) and tie within 1e-3 on every seed: contradicted
            tie = min(ga["rev_acc"] + gb["rev_acc"]) >= learned_level(ch) and max(abs(x) for x in dp) < 1e-3
            parts[cid].append((contradicted() if tie else vfi(dp)) if ok else precondition_failed())
        for pe in order:
            want_ev[cid] |= {f"reverse_p_{pe}": groups["mdm", pe]["rev_p"], f"reverse_acc_{pe}": groups["mdm", pe]["rev_acc"]}
    claims = {c["id"]: c for c in data["claims"]}
    for cid in CLAIMS:
        ev = _nan(claims[cid]["evidence"])
        # every interval in the evidence is one recomputed here, and nothing else is
        assert {k[:-5] for k in ev if k.endswith("_mean")} == set(want_ev[cid]), cid
        for name, x in want_ev[cid].items():
            bounded = re.fullmatch(r"(forward_acc|reverse_acc|reverse_p)_[a-z]+", name)  # an accuracy / probability
            assert_interval(ev, x, prefix=f"{name}_", bounds=(0, 1) if bounded else None)
        j = combine(parts[cid])
        assert (claims[cid]["verdict"], claims[cid]["reason"]) == (j.verdict, j.reason), (cid, claims[cid]["detail"])
    assert claims["arm_fails_reverse"]["evidence"]["learned_level"] == learned_level(chance)
    assert claims["pe_ordering"]["evidence"]["accuracy_order_holds"] == all(
        t_interval(want_ev["pe_ordering"][f"reverse_acc_{a}_minus_{b}"])[1] > 0 for a, b in zip(order, order[1:]))
    # the study's tables quote the same intervals
    table = data["tables"][0]
    def fmt(x):  # an accuracy's interval, clipped to [0, 1] (and saying so) where it runs outside
        m, lo, hi, n = t_interval(x)
        clipped = lo < 0 or hi > 1
        return "{:.3f} [{:.3f}, {:.3f}] (n={} seeds, t{})".format(m, max(lo, 0.0), min(hi, 1.0), n,
                                                                  ", clipped to [0, 1]" if clipped else "")
    for row in table["rows"]:
        kind = {"MDM": "mdm", "ARM": "arm"}[row[0]]
        assert row[2:4] == [fmt(G[kind, row[1]]["fwd_acc"]), fmt(G[kind, row[1]]["rev_acc"])], row


def test_registry_and_presets():
    mod = load_study("reversal")
    assert set(mod.PRESETS) == {"smoke", "cpu", "paper", "ladder"} and mod.TITLE
    for p in PRESETS.values():
        p.validate()
    assert all(PRESETS[k].pair_task is not None for k in ("smoke", "cpu", "paper"))  # the study's own task too
    assert PRESETS["paper"].model.n_layers == 1 and PRESETS["paper"].multilayer.n_layers > 1  # one-layer study, named multi-layer part
    with pytest.raises(ValueError, match="unknown preset"):
        run("huge", "/tmp/never")
    with pytest.raises(ConfigError, match="positions"):
        from_dict(ReversalPreset, {"positions": ["rope", "sinusoid"]})
    with pytest.raises(ConfigError, match="seeds"):
        from_dict(ReversalPreset, {"seeds": []})


@pytest.mark.parametrize("dataset", ["person_description", "celebrity"])
def test_real_data_pipeline(dataset):
    from dlmlab.models import TransformerConfig
    from dlmlab.studies.reversal.presets import RealDataPreset
    from dlmlab.studies.reversal.real import prepare, real_claim, real_table, run_real
    from dlmlab.training import TrainConfig

    cfg = RealDataPreset(enabled=True, dataset=dataset, n_facts=3, bpe_vocab=300, seq_len=128,
                         model=TransformerConfig(d_model=16, n_layers=1, n_heads=2),
                         train=TrainConfig(steps=3, batch_size=4, log_every=1), positions=["rope"])
    task = prepare(cfg)
    n_items = 30 if dataset == "person_description" else 3
    assert len(task.forward_test) == len(task.reverse_test) == n_items
    # the training templates (the gate of "learned the facts"): every training document ranked against all people
    assert len(task.forward_train) == (90 if dataset == "person_description" else 3)
    assert all(len(c) == 3 and 0 <= i < 3 for _, c, i in task.reverse_test)
    assert task.mask_id == task.vocab_size - 1 and task.pad_id == task.vocab_size - 2
    # candidates are scored at the training width whatever seq_len pads them to: the bidirectional MDM
    # attends to every pad, so extra pads it never saw in training would change its scores
    import torch

    from dlmlab.models import Transformer
    from dlmlab.studies.reversal.real import score_candidates

    torch.manual_seed(0)
    mdm = Transformer(dataclasses.replace(cfg.model, vocab_size=task.vocab_size, max_seq_len=256,
                                          attn_mask="bidirectional"))
    wide, wider = (score_candidates(mdm, task, "mdm", task.reverse_test, n) for n in (128, 256))
    assert (wide == wider).all()
    real = run_real(cfg, 0, progress=False)  # an int: MIN_SEEDS consecutive seeds from it
    assert real["seeds"] == [0, 1, 2]
    assert {(r["kind"], r["positions"], r["seed"]) for r in real["runs"]} == {
        (k, "rope", s) for k in ("mdm", "arm") for s in (0, 1, 2)}
    n_fwd = len(task.forward_test)
    for r in real["runs"]:  # a fraction of the test items: k / n for a whole k
        for key, n in (("forward_acc", n_fwd), ("reverse_acc", n_items)):
            assert 0 <= r[key] <= 1 and r[key] * n == pytest.approx(round(r[key] * n), abs=1e-9), (key, r[key])
    assert len(real_table(real).rows) == 2
    c = real_claim(real)
    # the claim's numbers are the runs' per-seed values and their paired Student-t interval (recomputed here)
    from dlmlab.report.claims import learned_level, precondition_failed, verdict_from_interval
    from value_util import t_interval

    per_seed = {(k, key): [r[key] for r in sorted(real["runs"], key=lambda r: r["seed"]) if r["kind"] == k]
                for k in ("mdm", "arm") for key in ("forward_acc", "reverse_acc", "reverse_acc_per_token",
                                                    "forward_train_acc_per_token")}
    assert c.evidence["mdm_reverse_acc_per_token_rope"] == per_seed["mdm", "reverse_acc_per_token"]
    assert c.evidence["arm_reverse_acc_per_token_rope"] == per_seed["arm", "reverse_acc_per_token"]
    assert c.evidence["mdm_forward_acc_rope"] == per_seed["mdm", "forward_acc"]  # summed score: evidence only
    assert c.evidence["mdm_forward_train_acc_per_token_rope"] == per_seed["mdm", "forward_train_acc_per_token"]
    mean, lo, hi, n = t_interval([a - b for a, b in zip(per_seed["mdm", "reverse_acc_per_token"],
                                                        per_seed["arm", "reverse_acc_per_token"])])
    assert c.evidence["mdm_minus_arm_rope"] == pytest.approx(mean, abs=1e-12) and c.evidence["mdm_minus_arm_rope_n"] == n
    got_lo, got_hi = c.evidence["mdm_minus_arm_rope_ci95"]
    assert (got_lo, got_hi) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12)) or lo != lo
    assert lo <= c.evidence["mdm_minus_arm_rope"] <= hi or lo != lo
    learned = all(min(per_seed[k, "forward_train_acc_per_token"]) >= learned_level(real["chance"])
                  for k in ("mdm", "arm"))
    want = verdict_from_interval(lo, hi) if learned else precondition_failed()
    assert (c.verdict, c.reason) == (want.verdict, want.reason) and c.holds == (lo > 0)
    with pytest.raises(ConfigError, match="n_facts"):
        RealDataPreset(n_facts=31).validate()


def _fake_real(mdm: list[float], arm: list[float]) -> dict:
    runs = [{"kind": k, "positions": "rope", "seed": s, "reverse_acc": v, "reverse_acc_per_token": v,
             "forward_acc": 1.0, "forward_train_acc_per_token": 1.0, "reverse_distinct_argmax": 3,
             "forward_train_distinct_argmax_per_token": 10}
            for k, vals in (("mdm", mdm), ("arm", arm)) for s, v in enumerate(vals)]
    return {"runs": runs, "seeds": list(range(len(mdm))), "chance": 0.1}


def test_real_claim_needs_an_interval_above_zero():
    from dlmlab.studies.reversal.real import real_claim, real_seeds

    assert real_claim(_fake_real([0.4, 0.5, 0.45], [0.15, 0.2, 0.17])).holds is True
    # one seed where the ARM wins: the interval reaches below 0, so the claim does not hold
    c = real_claim(_fake_real([0.4, 0.1, 0.45], [0.15, 0.2, 0.17]))
    assert c.holds is False and c.evidence["mdm_minus_arm_rope_ci95"][0] < 0
    assert real_claim(_fake_real([0.1, 0.1, 0.1], [0.17, 0.15, 0.2])).holds is False
    assert real_seeds([4, 7, 9]) == [4, 7, 9] and real_seeds(5) == [5, 6, 7]
    for bad in ([0, 1], [1, 1, 2]):
        with pytest.raises(ConfigError, match="at least 3 distinct seeds"):
            real_seeds(bad)
