"""Three verdicts: reproduced / contradicted / inconclusive (underpowered, precondition, not run).

The verdict helpers, the Claim's validation and derived ``holds``, the markdown report, and for each study
that a claim which holds is reproduced (and only such a claim) while the others follow the rules: an interval
wholly on the other side or a mechanism absent in a model that learned the task -> contradicted; an interval
spanning 0 -> underpowered; a model that never learned the task -> precondition; not run -> not run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlmlab.report import StudyResult
from dlmlab.report.claims import (REPRODUCED, Claim, Judgement, claim, combine, contradicted, count_verdicts,
                                  judgement_of, not_run, precondition, precondition_failed, underpowered,
                                  verdict_from_interval, verdict_summary)
from dlmlab.report.intervals import mean_ci
from dlmlab.report.results import render_markdown
from reversal_summary import KINDS, PES, reversal_summary


def follows_rules(c: Claim) -> Claim:
    """The invariants every study claim keeps: reproduced exactly when it holds; holds None only when nothing was
    evaluated (not run, or a precondition that left nothing to test); no study claim is left unjudged."""
    assert (c.verdict == "reproduced") == (c.holds is True), (c.id, c.verdict, c.holds)
    if c.holds is None:
        assert c.verdict == "inconclusive" and c.reason in ("not_run", "precondition"), (c.id, c.reason)
    assert c.reason != "unjudged", c.id
    d = c.to_dict()
    assert (d["verdict"], d["reason"], d["holds"]) == (c.verdict, c.reason, c.holds)
    return c


def v(c: Claim) -> tuple[str, str | None]:
    follows_rules(c)
    return c.verdict, c.reason


# ------------------------------------------------------------------------------------------ helpers
def test_verdict_from_interval_sides_and_levels():
    assert verdict_from_interval(0.1, 0.3) == REPRODUCED
    assert verdict_from_interval(-0.53, -0.38, what="rope - learned").verdict == "contradicted"
    assert "rope - learned [-0.53, -0.38] below 0" == verdict_from_interval(-0.53, -0.38, what="rope - learned").detail
    assert verdict_from_interval(-0.1, 0.2).reason == "underpowered"
    assert verdict_from_interval(0.0, 0.2).reason == "underpowered"  # touching 0 is not excluding it
    assert verdict_from_interval(-0.3, -0.1, side=-1) == REPRODUCED  # lower is better
    assert verdict_from_interval(0.1, 0.3, side=-1).verdict == "contradicted"
    # a level other than 0: the reversal study's gradient cosine 0.318 [0.291, 0.341] against 0.5
    assert verdict_from_interval(0.291, 0.341, level=0.5).verdict == "contradicted"
    assert verdict_from_interval(0.45, 0.7, level=0.5).reason == "underpowered"
    assert verdict_from_interval(0.51, 0.7, level=0.5) == REPRODUCED
    assert verdict_from_interval(math.nan, math.nan).reason == "underpowered"
    with pytest.raises(ValueError, match="side"):
        verdict_from_interval(0.1, 0.2, side=0)
    with pytest.raises(ValueError, match="above its upper end"):
        verdict_from_interval(0.3, 0.2)
    # agrees with the intervals' own rule
    iv = mean_ci([0.2, 0.25, 0.3])
    assert (verdict_from_interval(iv.lo, iv.hi) == REPRODUCED) == (iv.excludes_zero() and iv.lo > 0)


def test_judgement_validation_and_combine():
    with pytest.raises(ValueError, match="verdict must be"):
        Judgement("holds")
    with pytest.raises(ValueError, match="needs a reason"):
        Judgement("inconclusive")
    with pytest.raises(ValueError, match="needs a reason"):
        Judgement("inconclusive", "bad luck")
    with pytest.raises(ValueError, match="has no reason"):
        Judgement("reproduced", "underpowered")
    with pytest.raises(ValueError, match="has no reason"):
        Judgement("contradicted", "precondition")
    assert precondition(True) is None and precondition(False, "at chance").reason == "precondition"
    assert combine([REPRODUCED, REPRODUCED]) == REPRODUCED
    # one counterexample contradicts an "every" claim; else precondition before underpowered before not run
    parts = [REPRODUCED, underpowered("a"), precondition_failed("b"), contradicted("c"), contradicted("d")]
    assert combine(parts) == contradicted("c; d")
    assert combine(parts[:3]) == precondition_failed("b")
    assert combine([underpowered("a"), not_run("x"), REPRODUCED]) == underpowered("a")
    assert combine([]).reason == "not_run"
    assert underpowered("x").label() == "inconclusive (underpowered)" and not_run().label() == "inconclusive (not run)"


def test_claim_holds_is_derived_and_must_agree_with_the_verdict():
    c = claim("x", "s", True, judgement=REPRODUCED, gap=1.0)
    assert c.holds is True and c.to_dict() == {"id": "x", "statement": "s", "holds": True, "verdict": "reproduced",
                                               "reason": None, "detail": "", "seed_ref": None, "seed_says": "",
                                               "study_effect": None, "deviation": None, "extension": False,
                                               "evidence": {"gap": 1.0}}
    c = claim("x", "s", False, judgement=underpowered("[-0.1, 0.2] spans 0"))
    assert c.holds is False and (c.verdict, c.reason, c.detail) == ("inconclusive", "underpowered", "[-0.1, 0.2] spans 0")
    assert claim("x", "s", None, judgement=not_run("no RoPE")).holds is None
    assert claim("x", "s", None, judgement=precondition_failed("at chance")).holds is None
    assert claim("x", "s", False, judgement=precondition_failed("at chance")).holds is False
    # a verdict never changes whether a claim holds
    for holds, j in [(True, contradicted()), (False, REPRODUCED), (None, REPRODUCED), (False, not_run()),
                     (None, contradicted()), (None, underpowered())]:
        with pytest.raises(ValueError, match="claim 'x'"):
            claim("x", "s", holds, judgement=j)
    # "reason" stays an ordinary evidence key (the state study uses it)
    assert claim("x", "s", None, judgement=not_run(), reason="not run").evidence == {"reason": "not run"}
    # without a verdict (code written before verdicts): from holds; a bare False is not guessed to be a contradiction
    assert claim("x", "s", True).verdict == "reproduced"
    assert (claim("x", "s", False).verdict, claim("x", "s", False).reason) == ("inconclusive", "unjudged")
    assert claim("x", "s", None).reason == "not_run"
    with pytest.raises(ValueError, match="not run"):
        Claim("x", "s", "inconclusive", "not_run", evaluated=True)
    with pytest.raises(ValueError, match="unevaluated"):
        Claim("x", "s", "contradicted", evaluated=False)


def test_counts_and_older_results():
    claims = [claim("a", "s", True), claim("b", "s", False, judgement=contradicted()),
              claim("c", "s", False, judgement=underpowered()), claim("d", "s", False, judgement=underpowered()),
              claim("e", "s", None, judgement=precondition_failed())]
    counts = count_verdicts(claims)
    assert counts == {"reproduced": 1, "contradicted": 1, "inconclusive": 3, "underpowered": 2, "precondition": 1}
    assert verdict_summary(counts) == "1 reproduced, 1 contradicted, 3 inconclusive (2 underpowered, 1 precondition)"
    assert verdict_summary(count_verdicts(claims[:2])) == "1 reproduced, 1 contradicted, 0 inconclusive"
    assert count_verdicts([c.to_dict() for c in claims]) == counts  # the same read back from results.json
    assert judgement_of({"holds": False}).reason == "unjudged" and judgement_of({"holds": None}).reason == "not_run"
    assert judgement_of({"holds": True, "verdict": "reproduced"}) == REPRODUCED
    assert judgement_of({"holds": False, "verdict": "inconclusive", "reason": "underpowered", "detail": "d"}) == \
        underpowered("d")


def test_markdown_report_shows_verdict_reason_and_counts():
    res = StudyResult("s", "smoke", {}, claims=[
        claim("a", "A beats B", True, judgement=REPRODUCED, gap=0.3),
        claim("b", "C beats D", False, judgement=contradicted("C - D [-0.53, -0.38] below 0")),
        claim("c", "E beats F", False, judgement=underpowered("E - F [-0.1, 0.2] spans 0 | odd"))])
    md = render_markdown(res, "T")
    assert "1 reproduced, 1 contradicted, 1 inconclusive (1 underpowered)." in md
    assert "| claim | statement | summary line it tests | study's effect | verdict | evidence |" in md
    assert "| `a` | A beats B | - | - | **reproduced** | gap=0.300 |" in md
    assert "| `b` | C beats D | - | - | contradicted: C - D [-0.53, -0.38] below 0 |" in md
    assert "inconclusive (underpowered): E - F [-0.1, 0.2] spans 0 \\| odd |" in md  # a pipe cannot break the row
    assert "does not hold" not in md


# ------------------------------------------------------------------------------------------ state
def _cell(arch, task, probe_acc, learned=True, above=True, **kw):
    return dict(arch=arch, task=task, probes=[{"accuracy": a} for a in probe_acc], n_layers=len(probe_acc) - 1,
                learned=learned, above_chance=above, **kw)


def test_state_verdicts():
    from dlmlab.studies.state import claims as C

    late = [0.5, 0.55, 0.6, 0.62, 1.0]
    cells = {(a, t): _cell(a, t, late) for a in ("mamba", "lstm") for t in ("parity", "s3")}
    assert v(C.late_in_recurrent(cells)) == ("reproduced", None)
    cells[("lstm", "parity")] = _cell("lstm", "parity", [0.5, 0.6, 1.0, 1.0, 1.0])  # the cpu run: jump at layer 2
    cl = C.late_in_recurrent(cells)
    assert v(cl) == ("contradicted", None) and "lstm/parity: largest jump enters layer 2 of 4" in cl.detail
    for c in cells.values():  # every Mamba / LSTM cell at chance: no profile to test
        c["above_chance"] = c["learned"] = False
    assert v(C.late_in_recurrent(cells)) == ("inconclusive", "precondition")
    assert v(C.late_in_recurrent({})) == ("inconclusive", "not_run")
    # S3 at chance in the Transformer: precondition, not a contradiction
    tr = {("transformer", t): _cell("transformer", t, [0.2, 0.6, 0.7, 0.8, 0.9]) for t in ("parity", "s3", "dyck")}
    assert v(C.gradual_in_transformer(tr)) == ("reproduced", None)
    tr[("transformer", "parity")] = _cell("transformer", "parity", [0.2, 0.3, 0.3, 0.3, 0.9])
    assert v(C.gradual_in_transformer(tr)) == ("contradicted", None)  # one block adds all the gain
    tr[("transformer", "s3")]["above_chance"] = False
    assert v(C.s3_with_parity(tr)) == ("inconclusive", "precondition")
    for c in tr.values():
        c["above_chance"] = False
    assert v(C.gradual_in_transformer(tr)) == ("inconclusive", "precondition")
    dy = {(a, "dyck"): _cell(a, "dyck", [0.2, 0.6, 0.7, 0.8, 0.9], learned=False) for a in ("transformer", "mamba", "lstm")}
    assert v(C.dyck_inversion(dy)) == ("inconclusive", "precondition")
    dy[("transformer", "dyck")] = _cell("transformer", "dyck", [0.99, 0.5, 0.6, 0.9, 0.95])
    assert v(C.dyck_inversion(dy)) == ("contradicted", None)
    assert v(C.dyck_inversion({})) == ("inconclusive", "not_run")


def _ablation(ps, rs, lens=(40, 80, 120)):
    return {kind: {L: {"drop": d} for L, d in zip(lens, v)} for kind, v in (("probe_subspace", ps), ("random_subspace", rs))}


def test_state_ablation_and_causality_verdicts():
    from dlmlab.studies.state import claims as C

    above = {40: True, 80: True, 120: True}
    draws = list(np.random.default_rng(0).normal(0.0, 0.005, 200))  # issue 34: 200 random subspaces at every length

    def cell(ab, by=above):
        ps = {L: r["drop"] for L, r in ab["probe_subspace"].items()}
        return _cell("lstm", "s3", [0.2, 0.5, 0.9, 1, 1], ablation=ab, train_len=40, above_chance_by_len=by,
                     control={"value": ps[40], "draws": draws},
                     control_ood={"value_by_len": {L: ps[L] for L in (80, 120)},
                                  "draws_by_len": {L: draws for L in (80, 120)}})
    assert v(C.direction_ablation({("lstm", "s3"): cell(_ablation([0.5, 0.4, 0.4], [0, 0, 0]))})) == ("reproduced", None)
    assert v(C.direction_ablation({("lstm", "s3"): cell(_ablation([0.0, 0.4, 0.4], [0, 0, 0]))})) == ("contradicted", None)
    assert v(C.direction_ablation({("lstm", "s3"): cell(_ablation([0.5, 0.0, 0.0], [0, 0, 0]))})) == ("contradicted", None)
    at_chance_unseen = cell(_ablation([0.5, 0.4, 0.4], [0, 0, 0]), {40: True, 80: False, 120: False})
    assert v(C.direction_ablation({("lstm", "s3"): at_chance_unseen})) == ("inconclusive", "precondition")
    # judged on the pretrained checkpoints (issue 27; more cases in test_state_claims.py)
    rc = lambda drops, acc=1.0: [{"arch": "mamba", "path": "m", "train_len": 40, "acc_by_len": {40: acc},  # noqa: E731
                                  "summary": {"chance": 0.5}, "probes": [{"accuracy": a} for a in (0.2, 0.5, 0.9, 1, 1)],
                                  "layer_ablation_drop": drops, "layer_random_drop": [0.0] * 5}]
    assert v(C.readability_causality(rc([0.0, 0.3, 0.0, 0.1, 0.0]))) == ("reproduced", None)
    assert v(C.readability_causality(rc([0.9, 0.0, 0.0, 0.5, 0.0]))) == ("contradicted", None)  # same block
    # the model learned its task but no block's drop exceeds the control: the mechanism is absent
    assert v(C.readability_causality(rc([0.9, 0.0, 0.0, 0.0, 0.0]))) == ("contradicted", None)
    assert v(C.readability_causality(rc([0.9, 0.0, 0.0, 0.0, 0.0], acc=0.5))) == ("inconclusive", "precondition")


def test_claims_with_nothing_measured_are_not_run():
    from dlmlab.studies.reversal import claims as RC
    from dlmlab.studies.reversal.real import real_claim

    c = real_claim({"runs": [], "seeds": [0, 1, 2], "chance": 0.1})
    assert c.holds is None and v(c) == ("inconclusive", "not_run")
    assert v(RC.arm_fails_reverse({}, [], 0.1)) == ("inconclusive", "not_run")


def test_a_damaged_stored_verdict_is_shown_as_unjudged_with_the_error():
    j = judgement_of({"verdict": "reproduced", "reason": "underpowered", "holds": True})
    assert (j.verdict, j.reason) == ("inconclusive", "unjudged") and "invalid" in j.detail


def test_state_conv1d_verdicts_follow_the_intervals():
    from dlmlab.studies.state import claims as C

    def conv(drops, noise=0.01, above=True):
        rng = np.random.default_rng(0)

        def run(acc):
            return {"acc_by_len": {40: acc}, "acc_per_seq": {40: list(acc + rng.normal(0, noise, 32))},
                    "above_chance": above, "learned": above}
        out = {}
        for t, d in drops.items():
            for s in range(3):
                out[("mamba", t, s)], out[("mamba-noconv", t, s)] = run(0.8), run(0.8 - d[s] if isinstance(d, list) else 0.8 - d)
        return out

    assert v(C.conv1d(conv({"parity": 0.07, "s3": 0.12, "dyck": 0.0}))) == ("reproduced", None)
    cl = C.conv1d(conv({"parity": -0.05, "s3": 0.12, "dyck": 0.0}))  # removing Conv1D helps parity
    assert v(cl) == ("contradicted", None) and "parity drop" in cl.detail
    assert v(C.conv1d(conv({"parity": 0.07, "s3": 0.12, "dyck": 0.1}))) == ("contradicted", None)  # Dyck too
    assert v(C.conv1d(conv({"parity": [0.1, -0.1, 0.0], "s3": 0.12, "dyck": 0.0}))) == ("inconclusive", "underpowered")
    assert v(C.conv1d(conv({"parity": [0.1, -0.1, 0.0], "s3": 0.12, "dyck": 0.0}, above=False))) == \
        ("inconclusive", "precondition")  # Mamba with Conv1D at chance: nothing to lose
    short = conv({"parity": 0.07, "s3": 0.12, "dyck": 0.0})
    del short[("mamba-noconv", "dyck", 2)]
    assert v(C.conv1d(short)) == ("inconclusive", "not_run")


# ------------------------------------------------------------------------------------------ reversal


def _reversal(s, chance=0.1) -> dict[str, Claim]:
    from dlmlab.studies.reversal import claims as C

    return {c.id: c for c in C.make_claims(s, PES, KINDS, chance=chance, pair_summary=s, pair_chance=chance)}


def test_reversal_verdicts():
    assert all(v(c) == ("reproduced", None) for c in _reversal(reversal_summary()).values())
    # the cpu run's pe_ordering: RoPE - learned about -0.44 -> contradicted
    cl = _reversal(reversal_summary(rev_p={"alibi": [0.9, 0.8, 0.85], "rope": [0.1, 0.12, 0.11], "learned": [0.55, 0.5, 0.6]}))
    assert v(cl["pe_ordering"]) == ("contradicted", None) and "rope - learned" in cl["pe_ordering"].detail
    tie = _reversal(reversal_summary(rev_p={"alibi": [0.9, 0.5, 0.85], "rope": [0.6, 0.55, 0.55], "learned": [0.3, 0.2, 0.25]}))
    assert v(tie["pe_ordering"]) == ("inconclusive", "underpowered")  # seeds disagree: the interval spans 0
    # the cpu run's gradient alignment: RoPE cosine 0.318 [0.291, 0.341] under the 0.5 level -> contradicted
    low = _reversal(reversal_summary(grad={"alibi": [0.8] * 3, "rope": [0.29, 0.32, 0.34], "learned": [0.8] * 3}))
    assert v(low["gradient_alignment_positive"]) == ("contradicted", None)
    spans = _reversal(reversal_summary(grad={"alibi": [0.45, 0.6, 0.7], "rope": [0.8] * 3, "learned": [0.1] * 3}))
    assert v(spans["gradient_alignment_positive"]) == ("inconclusive", "underpowered")
    assert v(_reversal(reversal_summary(arm_rev_acc=0.5))["arm_fails_reverse"]) == ("contradicted", None)
    # a model that never learned the forward facts: precondition
    assert v(_reversal(reversal_summary(arm_fwd=0.05))["arm_fails_reverse"]) == ("inconclusive", "precondition")
    at_chance = _reversal(reversal_summary(mdm_fwd=0.05, grad={pe: [0.1] * 3 for pe in PES},
                                   pos_corr={pe: [-0.5, -0.4, -0.6] for pe in PES}))
    assert v(at_chance["gradient_alignment_positive"]) == ("inconclusive", "precondition")
    assert v(at_chance["attention_correlation_positive"]) == ("inconclusive", "precondition")
    neg = _reversal(reversal_summary(pos_corr={"alibi": [1.0] * 3, "rope": [-0.5, -0.4, -0.6], "learned": [0.9] * 3}))
    assert v(neg["attention_correlation_positive"]) == ("contradicted", None)
    from dlmlab.studies.reversal import claims as C

    assert v(C.pe_ordering(reversal_summary(), ["rope"])) == ("inconclusive", "not_run")
    assert v(C.make_claims(reversal_summary(), PES, ["mdm"], 0.1)[0]) == ("inconclusive", "not_run")  # no ARM


# ------------------------------------------------------------------------------------------ prediff
def _cmp(a, b, lo, hi):
    return {"a": a, "b": b, "mean": (lo + hi) / 2, "lo": lo, "hi": hi, "per_seed": [lo, hi, lo], "n_seeds": 3,
            "n_windows": 8, "holds": hi < 0}


def _timed(tokens_per_s, rounds=5, interleaved=True):
    return {"tokens_per_s": tokens_per_s, "times_s": [1.0 / tokens_per_s] * rounds, "interleaved": interleaved}


def test_prediff_verdicts():
    from dlmlab.studies.prediff.claims import compute_claims

    def claims(hybrid=(-0.3, -0.1), shifted=(-0.3, -0.1), steps=(-20.0, -10.0), ar=(-1.0, -0.1), speed=(120.0, 100.0)):
        comp = {"hybrid_vs_uniform_bidir": _cmp("prediff", "uniform_bidir", *hybrid),
                "combined_vs_attention_only": _cmp("attn_obj", "prediff", -0.3, -0.1),
                "combined_vs_objective_only": _cmp("attn_obj", "diffugpt", *shifted),
                "ar_init_vs_scratch_steps": _cmp("prediff", "scratch", *steps),
                "ar_control_vs_best_diffusion": _cmp("ar_control", "attn_obj", *ar)}
        sp = {"prediff@8": _timed(speed[0]), "ar_control": _timed(speed[1])}
        return {c.id: c for c in compute_claims({"comparisons": comp, "speed": sp})}

    assert all(v(c) == ("reproduced", None) for c in claims().values())
    cl = claims(shifted=(-0.5, 0.0016))  # attn_obj - diffugpt spans 0 (and holds the study's -0.46 nats)
    assert v(cl["hybrid_beats_uniform_bidirectional"]) == ("reproduced", None)  # one comparison, one claim
    assert v(cl["attention_and_objective_compose"]) == ("inconclusive", "underpowered")
    cl = claims(hybrid=(0.1, 0.3))  # uniform attention is better: contradicted
    assert v(cl["hybrid_beats_uniform_bidirectional"]) == ("contradicted", None)
    assert v(claims(steps=(5.0, 20.0))["ar_init_reaches_threshold_faster_than_scratch"]) == ("contradicted", None)
    assert v(claims(ar=(0.1, 0.2))["ar_control_still_better"]) == ("contradicted", None)
    assert v(claims(speed=(105.0, 100.0))["few_step_sampling_faster_than_ar"]) == ("contradicted", None)
    empty = {c.id: c for c in compute_claims({"comparisons": {}, "speed": {}})}
    assert all(v(c) == ("inconclusive", "not_run") for c in empty.values())
    untimed = compute_claims({"comparisons": {}, "speed": {"prediff@8": _timed(300.0, rounds=1),
                                                           "ar_control": _timed(100.0, rounds=1)}})[-1]
    assert v(untimed) == ("inconclusive", "not_run")
    # models that never learned the language (held-out NLL >= log(vocabulary)): precondition, not underpowered
    # the interval holds the study's -0.17 nats (else: effect_excluded, tested in test_prediff_claims.py)
    comp = {"hybrid_vs_uniform_bidir": _cmp("prediff", "uniform_bidir", -0.2, 0.1)}
    nll = lambda x: {m: {"val_nll": x} for m in ("prediff", "uniform_bidir", "attn_obj", "diffugpt")}  # noqa: E731
    res = {"comparisons": comp, "speed": {}, "data": {"tokenizer_vocab": 384}}
    chance, learned = np.log(384) + 0.01, 4.99  # the smoke run's adaptations reach 4.99 nats
    assert v(compute_claims({**res, "methods": nll(chance)})[0]) == ("inconclusive", "precondition")
    assert v(compute_claims({**res, "methods": nll(learned)})[0]) == ("inconclusive", "underpowered")
    assert v(compute_claims(res)[0]) == ("inconclusive", "underpowered")  # vocabulary / NLL unknown: no precondition


# ------------------------------------------------------------------------------------------ induction
# (issue 27: learned preconditions at 90% of the way from chance, intervals over evaluation sequences, permutation
# controls with >= 200 draws; every definition is pinned both ways in tests/test_induction_definitions.py)
def _seq(acc, n=40):
    return [acc + 0.01 * ((i % 3) - 1) for i in range(n)]


def _dlm(L=2, acc=0.99, **kw):
    per = {k: _seq(g, 40) for k, g in (("left", 1.0), ("right", 1.5), ("both", 2.4))}
    m = {"objective": "dlm", "context": "both", "n_layers": L, "chance": 0.02,
         "accuracy": {d: {"left": acc / 2, "right": acc / 2, "both": acc} for d in ("forward", "reverse")},
         "accuracy_per_seq": {"forward": {"left": _seq(acc / 2), "both": _seq(acc)}},
         "prev_token_scores": [[0.9, 0.1, 0.0, 0.1]], "next_token_scores": [[0.0, 0.8, 0.1, 0.1]],
         "prev_token_scores_init": [[0.1] * 4], "next_token_scores_init": [[0.1] * 4],
         "gains": {d: {"left": 1.0, "right": 1.5, "both": 2.4, "ratio": 0.96, "per_seq": per}
                   for d in ("forward", "reverse")},
         "induction_set_ablation": {"heads": [[1, 2]], "base": acc, "drop": 0.6, "random_p95": 0.1,
                                    "random_drops": [0.1] * 200, "threshold": 0.3, "control": {"n_draws": 200}},
         "probe": {"r2": [0.2, 0.85, 0.9], "r2_control": [0.0, -0.01, 0.0], "r2_pooled": [0.5, 0.95, 0.95]},
         "patch": {"low": 0.05, "high": 0.5, "delta": 0.5, "random_p95": 0.2, "random_deltas": [0.1] * 200,
                   "entropy_clean": 1.0},
         "local_window": {"none": acc, "pm1": 0.5, "pm2_only": 0.6, "pm1_pm2": 0.2, "far2": acc - 0.02},
         "top_induction_head": [1, 2], "fold": {"accuracy": acc, "folded_accuracy": acc - 0.02},
         "composition_into_top_head": {"Q": [[0.5, 0.4, 0.1, 0.2], [0] * 4], "K": [[0.3, 0.3, 0.2, 0.1], [0] * 4]},
         "emergence": {"curve": [(s, 0.02 if s < 20000 else 0.99) for s in range(1000, 40001, 1000)],
                       "run_steps": 40000}}
    m.update(kw)
    return m


def _ar(L=2, acc=0.9):
    return {"objective": "ar", "context": "left", "n_layers": L, "chance": 0.02,
            "accuracy": {d: {"left": acc, "right": None, "both": None} for d in ("forward", "reverse")},
            "accuracy_per_seq": {"forward": {"left": _seq(acc)}},
            "induction_set_ablation": {"heads": [[1, 0]], "base": acc, "drop": 0.4, "random_p95": 0.1,
                                       "random_drops": [0.1] * 200, "threshold": 0.3, "control": {"n_draws": 200}}}


def test_induction_verdicts():
    from dlmlab.studies.induction import claims as C

    ok = {c.id: c for c in C.all_claims({"ar_L1": _ar(1, 0.05), "dlm_L1": _dlm(1, 0.05), "ar_L2": _ar(acc=0.93),
                                          "dlm_L2": _dlm()})}
    # issue 34's definitions need measurements these fixtures (an older run's) lack: the few-id evaluation, the
    # per-sequence set ablations, the probe's RMSE and full-range R^2, composition at initialisation; without them
    # those claims are never reproduced (tests/test_induction_claims.py judges them on the new measurements)
    new_data = {"dlm_beats_ar_with_both_sides", "induction_heads_ablation_drop", "mask_rate_probe_r2",
                "q_and_k_composition_in_induction_heads"}
    assert all(v(c) == ("reproduced", None) for k, c in ok.items() if k not in new_data), \
        {k: c.verdict for k, c in ok.items()}
    assert all(ok[k].verdict != "reproduced" for k in new_data)
    # heads absent in a model that learned: contradicted; in one at chance: precondition
    same_head = {"next_token_scores": [[0.9, 0.1, 0.0, 0.0]]}
    assert v(C.prev_and_next_token_heads_in_layer0({"dlm_L2": _dlm(**same_head)})) == ("contradicted", None)
    assert v(C.prev_and_next_token_heads_in_layer0({"dlm_L2": _dlm(acc=0.03, **same_head)})) == \
        ("inconclusive", "precondition")
    # the smoke run: both models at chance
    assert v(C.dlm_beats_ar_with_both_sides({"ar_L2": _ar(acc=0.03), "dlm_L2": _dlm(acc=0.02)})) == \
        ("inconclusive", "precondition")
    left_high = _dlm(accuracy_per_seq={"forward": {"left": _seq(0.99), "both": _seq(0.99)}})
    assert v(C.left_only_not_better_than_ar({"ar_L2": _ar(acc=0.91), "dlm_L2": left_high})) == ("contradicted", None)
    bad = {d: {"left": 1.0, "right": 1.0, "both": 3.0, "ratio": 1.5,
               "per_seq": {"left": _seq(1.0), "right": _seq(1.0), "both": _seq(3.0)}} for d in ("forward", "reverse")}
    assert v(C.both_approx_left_plus_right({"dlm_L2": _dlm(gains=bad)})) == ("contradicted", None)
    assert v(C.both_approx_left_plus_right({"dlm_L2": _dlm(acc=0.03, gains=bad)})) == ("inconclusive", "precondition")
    # two layers: one layer already doing induction contradicts; no depth learning it is a precondition
    assert v(C.two_layers_needed({"ar_L1": _ar(1, 0.5), "dlm_L1": _dlm(1, 0.05), "ar_L2": _ar(acc=0.95),
                                  "dlm_L2": _dlm()})) == ("contradicted", None)
    assert v(C.two_layers_needed({"ar_L1": _ar(1, 0.03), "dlm_L1": _dlm(1, 0.03), "ar_L2": _ar(acc=0.03),
                                  "dlm_L2": _dlm(acc=0.03)})) == ("inconclusive", "precondition")
    assert v(C.two_layers_needed({"ar_L2": _ar(), "dlm_L2": _dlm()})) == ("inconclusive", "not_run")
    # (the contradicted cases of the four claims issue 34 redefined are in tests/test_induction_claims.py)
    # head-set ablation: none learned leaves it unevaluated
    none = C.induction_heads_ablation_drop({"dlm_L2": _dlm(acc=0.1)})
    assert v(none) == ("inconclusive", "precondition") and none.holds is None
    assert v(C.induction_heads_ablation_drop({"dlm_L1": _dlm(1)})) == ("inconclusive", "not_run")
    # mask-rate read-out and patch: the model must have learned first; then a miss is a contradiction
    low_r2 = {"probe": {"r2": [0.2, 0.68, 0.9], "r2_control": [0.0, 0.7, 0.0], "r2_pooled": [0.5, 0.9, 0.9]}}
    assert v(C.mask_rate_probe_r2({"dlm_L2": _dlm(acc=0.03, **low_r2)})) == ("inconclusive", "precondition")
    patch = {"patch": {**_dlm()["patch"], "delta": -0.06, "random_p95": 0.03}}
    assert v(C.mask_rate_patch_raises_entropy({"dlm_L2": _dlm(**patch)})) == ("contradicted", None)
    # local window at chance: precondition; learned but flat: contradicted
    flat = {"none": 0.03, "pm1": 0.03, "pm2_only": 0.03, "pm1_pm2": 0.03, "far2": 0.03}
    assert v(C.local_window_sensitivity({"dlm_L2": _dlm(acc=0.03, local_window=flat)})) == \
        ("inconclusive", "precondition")
    flat = {k: 0.99 for k in flat}
    assert v(C.local_window_sensitivity({"dlm_L2": _dlm(local_window=flat)})) == ("contradicted", None)
    comp = {"composition_into_top_head": {"Q": [[0.1, 0.1, 0.9, 0.2], [0] * 4], "K": [[0.3, 0.3, 0.2, 0.1], [0] * 4]}}
    assert v(C.q_and_k_composition_in_induction_heads({"dlm_L2": _dlm(acc=0.03, **comp)})) == \
        ("inconclusive", "precondition")
