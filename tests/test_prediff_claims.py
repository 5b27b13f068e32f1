"""PreDiff claims on hand-made numbers: t-intervals over seeds with n, the study's effect (effect_excluded), the
learned preconditions, the censored steps-to-threshold comparison and the per-round speed ratio."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from dlmlab.studies.prediff.claims import (CLAIM_COMPARISONS, SPEED_MARGIN, below_context_free, compute_claims,
                                           flattened, learned_precondition, speed_claim)
from dlmlab.studies.prediff.seeds import STUDY_EFFECTS, STUDY_SPEED_LOG_RATIO
from dlmlab.studies.prediff.paired import (censored_steps_difference, fmt_interval, lower_is_better,
                                           round_log_ratios, seed_mean_t_interval)
from dlmlab.studies.prediff.threshold import fmt_steps, plateau_nll, steps_to_reach, threshold_nll


def v(c):
    return c.verdict, c.reason


# ----------------------------------------------------------------------------------------------- intervals
def test_seed_mean_t_interval_is_the_t_interval_over_seed_means():
    x = np.array([[1.0, 3.0], [2.0, 2.0], [4.0, 6.0]])  # seed means 2, 2, 5
    c = seed_mean_t_interval(x)
    half = stats.t.ppf(0.975, 2) * np.std([2, 2, 5], ddof=1) / math.sqrt(3)
    assert c["mean"] == pytest.approx(3.0) and c["lo"] == pytest.approx(3 - half) and c["hi"] == pytest.approx(3 + half)
    assert (c["n"], c["unit"], c["method"], c["n_windows"]) == (3, "seeds", "t", 2)
    assert fmt_interval(c).endswith("(n=3 seeds, t)")
    # with three seeds the t-interval is wider than [min, max] of the seed means (the old bootstrap's answer)
    assert c["lo"] < 2 and c["hi"] > 5
    one = seed_mean_t_interval(x[:1])  # one seed: evaluation noise only, and it says so
    assert (one["n"], one["unit"], one["method"]) == (2, "items", "t-items")


def test_censored_steps_difference_bounds_the_mean_from_both_sides():
    B = 500
    exact = censored_steps_difference([100, 150, 120], [300, 350, 310], B)  # nothing censored: the t-interval
    t = seed_mean_t_interval(np.array([[-200.0], [-200.0], [-190.0]]))
    assert (exact["lo"], exact["hi"]) == pytest.approx((t["lo"], t["hi"])) and exact["holds"]
    fast = censored_steps_difference([100, 150, 120], [None, None, None], B)  # scratch never reaches it
    assert fast["lo"] == -math.inf and fast["hi"] < 0 and fast["holds"]
    assert fast["per_seed"] == [-400.0, -350.0, -380.0] and fast["mean"] == pytest.approx(-376.6667, abs=1e-3)
    slow = censored_steps_difference([None, None, None], [100, 150, 120], B)  # AR init never reaches it
    assert slow["hi"] == math.inf and slow["lo"] > 0 and not slow["holds"]
    neither = censored_steps_difference([None, None, None], [None, None, None], B)
    assert (neither["lo"], neither["hi"], neither["mean"]) == (-math.inf, math.inf, 0.0)
    mixed = censored_steps_difference([100, None, 120], [None, 200, None], B)  # one seed each way: both ends open
    assert mixed["lo"] == -math.inf and mixed["hi"] == math.inf
    assert "censored" in fmt_interval(fast) and "-inf" in fmt_interval(fast)
    with pytest.raises(ValueError):
        censored_steps_difference([1, 2], [1], B)


def test_round_log_ratios_pair_the_rounds():
    # diffusion takes half the time of AR in every round but the second, where load slowed both alike
    d8, ar = [0.5, 1.0, 0.5, 0.5], [1.0, 2.0, 1.0, 1.0]
    r = round_log_ratios(d8, ar)
    assert r["per_round"] == pytest.approx([math.log(2)] * 4) and r["ratio"] == pytest.approx(2.0)
    assert r["ratio_interval"] == pytest.approx([2.0, 2.0]) and (r["n"], r["unit"]) == (4, "rounds")
    noisy = round_log_ratios([0.5, 0.6, 0.4], [0.55, 0.5, 0.5])
    assert noisy["lo"] < noisy["mean"] < noisy["hi"]
    with pytest.raises(ValueError):
        round_log_ratios([1.0], [1.0, 2.0])


# ------------------------------------------------------------------------------------------ paired claims
def _cmp(a, b, lo, hi, n=3):
    return {"a": a, "b": b, "mean": (lo + hi) / 2, "lo": lo, "hi": hi, "per_seed": [lo, hi, lo][:n], "n_seeds": n,
            "n": n, "unit": "seeds", "method": "t", "n_windows": 8, "holds": hi < 0}


def _res(hybrid=(-0.3, -0.1), shifted=(-0.3, -0.1), methods=None, data=None, attention=(-0.3, -0.1)):
    """``shifted``: combined - objective only (attn_obj - diffugpt); ``attention``: combined - attention only."""
    comp = {"hybrid_vs_uniform_bidir": _cmp("prediff", "uniform_bidir", *hybrid),
            "combined_vs_attention_only": _cmp("attn_obj", "prediff", *attention),
            "combined_vs_objective_only": _cmp("attn_obj", "diffugpt", *shifted),
            "ar_control_vs_best_diffusion": _cmp("ar_control", "attn_obj", -1.0, -0.5)}
    return {"comparisons": comp, "speed": {}, "methods": methods or {}, "data": data or {}}


def test_study_effects_are_the_summarys_perplexities_in_nats():
    # the summary's PPLs (003_59f6a69613976956.txt:36, :44, :45) as A - B log-PPL differences, the claims' unit
    assert STUDY_EFFECTS["hybrid_vs_uniform_bidir"] == pytest.approx(math.log(28.7) - math.log(34.1))
    assert STUDY_EFFECTS["combined_vs_attention_only"] == pytest.approx(math.log(26.9) - math.log(28.7))
    assert STUDY_EFFECTS["combined_vs_objective_only"] == pytest.approx(math.log(26.9) - math.log(42.8))
    assert STUDY_EFFECTS["ar_control_vs_best_diffusion"] == pytest.approx(math.log(18.9) - math.log(28.7))
    assert STUDY_SPEED_LOG_RATIO == pytest.approx(math.log(1800 / 1120))
    assert round(STUDY_EFFECTS["hybrid_vs_uniform_bidir"], 2) == -0.17  # the value issue 27 quoted


def test_each_comparison_counts_in_one_claim():
    keys = [k for ks in CLAIM_COMPARISONS.values() for k in ks]
    assert len(keys) == len(set(keys))
    # the run makes exactly these comparisons, no two of the same pair (attn_obj - diffugpt once)
    import importlib

    comparisons = importlib.import_module("dlmlab.studies.prediff.run")._comparisons
    rng = np.random.default_rng(0)
    names = ("prediff", "uniform_bidir", "diffugpt", "attn_obj", "scratch", "ar_control")
    res = {"per_window_nll": {n: rng.normal(4, 0.1, (3, 8)).tolist() for n in names},
           "methods": {n: {"bound": n != "ar_control", "val_nll": 4.0 + i / 10} for i, n in enumerate(names)},
           "threshold": {"steps": {"prediff": [100] * 3, "scratch": [None] * 3}, "budget": 500}}
    made = comparisons(res, None)
    assert set(made) == set(keys)
    assert len({(c["a"], c["b"]) for c in made.values()}) == len(made)
    # attn_obj - diffugpt spanning 0 leaves the hybrid claim alone and only moves the compose claim
    c = {x.id: x for x in compute_claims(_res(shifted=(-0.5, 0.1)))}
    assert v(c["hybrid_beats_uniform_bidirectional"]) == ("reproduced", None)
    assert v(c["attention_and_objective_compose"]) == ("inconclusive", "underpowered")
    assert set(c["hybrid_beats_uniform_bidirectional"].evidence) >= {"prediff_vs_uniform_bidir"}
    assert "attn_obj_vs_diffugpt" not in c["hybrid_beats_uniform_bidirectional"].evidence


def test_hybrid_interval_spanning_zero_but_excluding_the_study_effect_is_effect_excluded():
    c = {x.id: x for x in compute_claims(_res(hybrid=(-0.007, 0.007)))}
    hyb = c["hybrid_beats_uniform_bidirectional"]
    assert v(hyb) == ("inconclusive", "effect_excluded") and "-0.172" in hyb.detail and "n=3" in hyb.detail
    assert hyb.evidence["prediff_vs_uniform_bidir"]["study_effect"] == STUDY_EFFECTS["hybrid_vs_uniform_bidir"]
    assert hyb.evidence["prediff_vs_uniform_bidir"]["interval"].endswith("(n=3 seeds, t)")
    assert hyb.seed_ref == "003_59f6a69613976956.txt:44" and hyb.study_effect["hybrid_ppl"] == 28.7
    # the interval holds the study's effect: more seeds could decide it
    assert v(compute_claims(_res(hybrid=(-0.2, 0.05)))[0]) == ("inconclusive", "underpowered")
    assert v(compute_claims(_res())[0]) == ("reproduced", None)
    assert v(compute_claims(_res(hybrid=(0.01, 0.02)))[0]) == ("contradicted", None)


def test_compose_reads_effect_excluded_against_the_studys_objective_only_gap():
    # the cpu run's attn_obj - diffugpt interval (docs: before/after issue 27) excludes log(26.9 / 42.8) = -0.46
    comp = compute_claims(_res(shifted=(-0.0221, 0.0105)))[1]
    assert v(comp) == ("inconclusive", "effect_excluded") and "-0.464" in comp.detail
    assert comp.study_effect["combined_ppl"] == 26.9 and comp.seed_ref == "003_59f6a69613976956.txt:36"
    # an interval that holds -0.46 nats stays underpowered
    assert v(compute_claims(_res(shifted=(-0.5, 0.1)))[1]) == ("inconclusive", "underpowered")
    # combined - attention only: the study's gap is log(26.9 / 28.7) = -0.065
    assert v(compute_claims(_res(attention=(-0.01, 0.01)))[1]) == ("inconclusive", "effect_excluded")
    assert v(compute_claims(_res(attention=(-0.08, 0.01)))[1]) == ("inconclusive", "underpowered")


def _curve(start, end, steps=(0, 100, 200, 300, 400, 500), tau=60.0):
    return [{"step": s, "ppl": math.exp(end + (start - end) * math.exp(-s / tau))} for s in steps]


def _linear(start, end, steps=(0, 100, 200, 300, 400, 500)):
    return [{"step": s, "ppl": math.exp(start + (end - start) * s / steps[-1])} for s in steps]


def test_learned_means_below_the_context_free_level_and_a_flattened_curve():
    data = {"unigram_nll": 5.0, "tokenizer_vocab": 1024}
    good = {"val_nll": 4.5, "curves": [_curve(6.0, 4.5)] * 3}
    assert flattened(good, 500)[0]
    still = {"val_nll": 4.5, "curves": [_linear(6.0, 4.5)] * 3}  # still falling as fast at the end
    assert not flattened(still, 500)[0]
    above = {"val_nll": 5.1, "curves": [_curve(6.0, 5.1)] * 3}
    res = {"data": data, "budget": 500, "methods": {"prediff": good, "uniform_bidir": good}}
    assert learned_precondition(res, ["prediff", "uniform_bidir"], flat=("prediff", "uniform_bidir")) is None
    # reproduced intervals count only when both models learned: a precondition, whichever way the interval points
    for bad, why in ((above, "context-free 5.000"), (still, "still improving")):
        methods = {m: good for m in ("uniform_bidir", "attn_obj", "diffugpt")} | {"prediff": bad}
        c = compute_claims({**_res(), "methods": methods, "data": data, "budget": 500})
        assert v(c[0]) == ("inconclusive", "precondition") and why in c[0].detail
        assert v(c[1]) == ("inconclusive", "precondition")  # attn_obj vs prediff
    # the failed precondition keeps what the interval alone would say
    methods = {m: good for m in ("uniform_bidir", "attn_obj", "diffugpt")} | {"prediff": above}
    c = compute_claims({**_res(hybrid=(-0.007, 0.007)), "methods": methods, "data": data, "budget": 500})[0]
    assert v(c) == ("inconclusive", "precondition") and "the interval alone: inconclusive (effect excluded)" in c.detail
    # below the context-free level on average but not beyond the seeds' spread: not learned
    edge = {"val_nll": 4.99, "val_nll_per_seed": [4.95, 5.03, 4.99], "curves": good["curves"]}
    assert not below_context_free(edge, 5.0) and below_context_free(good | {"val_nll_per_seed": [4.4, 4.5, 4.6]}, 5.0)
    pre = learned_precondition({"data": data, "methods": {"prediff": edge}}, ["prediff"])
    assert pre.reason == "precondition" and "(n=3 seeds, t)" in pre.detail
    # without a recorded unigram level, log(vocabulary) stands in; unknown numbers are not held against a model
    assert learned_precondition({"data": {"tokenizer_vocab": 100}, "methods": {"m": {"val_nll": 4.7}}}, ["m"])
    assert learned_precondition({"methods": {"m": {}}}, ["m"], flat=("m",)) is None


def test_ar_control_claim_needs_only_the_diffusion_curve_flattened():
    data = {"unigram_nll": 5.0}
    methods = {"ar_control": {"val_nll": 3.5, "curves": [_linear(3.6, 3.5)] * 3},  # AR fine-tuning still creeping
               "attn_obj": {"val_nll": 4.4, "curves": [_curve(5.5, 4.4)] * 3}}
    res = {"comparisons": {"ar_control_vs_best_diffusion": _cmp("ar_control", "attn_obj", -1.0, -0.8)},
           "methods": methods, "data": data, "budget": 500, "speed": {}}
    assert v(compute_claims(res)[3]) == ("reproduced", None)
    methods["attn_obj"] = {"val_nll": 4.4, "curves": [_linear(5.5, 4.4)] * 3}
    assert v(compute_claims(res)[3]) == ("inconclusive", "precondition")


# ------------------------------------------------------------------------------------------ threshold (§2)
def test_threshold_sits_midway_between_plateaus_and_a_flat_noisy_curve_does_not_set_it():
    B = 500
    scratch = [[{"step": s, "ppl": math.exp(5.5 + 0.02 * (-1) ** (s // 100 + k))} for s in range(0, B + 1, 100)]
               for k in range(3)]  # flat at 5.5 nats with noise: its best point no longer sets the threshold
    prediff = [_curve(7.0, 4.5) for _ in range(3)]
    assert plateau_nll(scratch, B) == pytest.approx(5.5, abs=0.02)
    assert threshold_nll(5.5, 4.5) == pytest.approx(5.0)
    thr = steps_to_reach({"prediff": {"curves": prediff}, "scratch": {"curves": scratch}}, B)
    assert thr["nll"] == pytest.approx(5.0, abs=0.02) and thr["budget"] == B
    assert thr["steps"]["prediff"] == [100] * 3 and thr["steps"]["scratch"] == [None] * 3
    assert thr["reached"] == {"prediff": "3/3", "scratch": "0/3"}
    assert fmt_steps(thr["steps"]["scratch"], B) == ">= 500, >= 500, >= 500"
    assert steps_to_reach({"prediff": {"curves": prediff}}, B) is None


def _threshold_res(a_steps, b_steps, B=500, prediff_nll=4.5):
    thr = {"ppl": 150.0, "nll": 5.0, "fraction": 0.5, "plateaus": {"prediff": 4.5, "scratch": 5.5}, "budget": B,
           "steps": {"prediff": a_steps, "scratch": b_steps}, "reached": {}}
    comp = {"ar_init_vs_scratch_steps": {"a": "prediff", "b": "scratch",
                                         **censored_steps_difference(a_steps, b_steps, B)}}
    return {"comparisons": comp, "threshold": thr, "speed": {}, "data": {"unigram_nll": 5.0}, "budget": B,
            "methods": {"prediff": {"val_nll": prediff_nll}}}


def test_threshold_claim_uses_censored_runs_honestly():
    cl = lambda *a, **k: compute_claims(_threshold_res(*a, **k))[2]  # noqa: E731
    c = cl([100, 150, 100], [None, None, None])
    assert v(c) == ("reproduced", None) and c.evidence["scratch_steps"] == ">= 500, >= 500, >= 500"
    assert v(cl([None, None, None], [100, 150, 100])) == ("contradicted", None)
    assert v(cl([None, None, None], [None, None, None])) == ("inconclusive", "underpowered")
    assert v(cl([100, None, 100], [None, 200, None])) == ("inconclusive", "underpowered")  # seeds disagree
    assert v(cl([100, 150, 100], [300, 350, 310])) == ("reproduced", None)  # both reached: plain t-interval
    assert v(cl([100, 150, 100], [None] * 3, prediff_nll=5.2)) == ("inconclusive", "precondition")
    # results.json stores an infinite end as null: read back, the verdict is the same
    r = _threshold_res([100, 150, 100], [None, None, None])
    r["comparisons"]["ar_init_vs_scratch_steps"]["lo"] = None
    assert v(compute_claims(r)[2]) == ("reproduced", None)


# ------------------------------------------------------------------------------------------ speed
def _timed(times, interleaved=True, n_tokens=32):
    return {"tokens_per_s": n_tokens / float(np.median(times)), "times_s": list(times), "interleaved": interleaved,
            "n_tokens": n_tokens}


def test_speed_claim_is_judged_on_the_per_round_ratios():
    ar = [1.0, 1.1, 0.9, 1.2, 1.0]
    fast = speed_claim({"prediff@8": _timed([t / 2 for t in ar]), "ar_control": _timed(ar)})
    assert v(fast) == ("reproduced", None) and fast.evidence["speedup"] == pytest.approx(2.0)
    assert fast.evidence["interval"].endswith("(n=5 rounds, t on log ratios)")
    near = speed_claim({"prediff@8": _timed([t / (1 + SPEED_MARGIN / 2) for t in ar]), "ar_control": _timed(ar)})
    assert v(near) == ("contradicted", None)  # faster, but by less than the margin in every round
    noisy = speed_claim({"prediff@8": _timed([0.5, 1.2, 0.6, 1.3, 0.7]), "ar_control": _timed(ar)})
    assert v(noisy) == ("inconclusive", "underpowered")
    # the medians alone would say 1.25x here; the rounds say it depends on the round
    assert noisy.evidence["speedup_of_medians"] > 1 + SPEED_MARGIN
    assert v(speed_claim({"prediff@8": _timed([0.5] * 2), "ar_control": _timed([1.0] * 2)})) == ("inconclusive", "not_run")
    assert v(speed_claim({"prediff@8": _timed([0.5] * 5, False), "ar_control": _timed(ar, False)})) == \
        ("inconclusive", "not_run")
    assert v(speed_claim({})) == ("inconclusive", "not_run")
    # rounds whose log-ratio interval spans log(1.1) but stays below the study's log(1800 / 1120): effect excluded
    close = speed_claim({"prediff@8": _timed([t / r for t, r in zip(ar, (1.0, 1.2, 1.05, 1.15, 1.1))]),
                         "ar_control": _timed(ar)})
    assert v(close) == ("inconclusive", "effect_excluded") and "0.474" in close.detail
    # timed models that did not learn the language: a precondition, however fast the sampler
    learned = {"val_nll_per_seed": [4.0, 4.1, 4.05]}
    res = {"data": {"unigram_nll": 5.0}, "methods": {"prediff": {"val_nll_per_seed": [5.5, 5.6, 5.5]},
                                                     "ar_control": learned}}
    slow_learner = speed_claim({"prediff@8": _timed([t / 2 for t in ar]), "ar_control": _timed(ar)}, res)
    assert v(slow_learner) == ("inconclusive", "precondition") and slow_learner.evidence["learned"]["holds"] is False
    res["methods"]["prediff"] = learned
    ok = speed_claim({"prediff@8": _timed([t / 2 for t in ar]), "ar_control": _timed(ar)}, res)
    assert v(ok) == ("reproduced", None) and ok.evidence["learned"]["holds"] is True


def test_lower_is_better_reports_n():
    c = lower_is_better(np.zeros((3, 4)) - 1.0, np.zeros((3, 4)))
    assert c["holds"] and c["n"] == 3


# ------------------------------------------------------------------------------------------ re-judging a stored run
def test_rejudge_recomputes_a_stored_run(tmp_path):
    """An old results.json (bootstrap-era verdicts, per-seed threshold list) re-judged from its measurements."""
    from dlmlab.studies.prediff.rejudge import main, rejudge

    rng = np.random.default_rng(0)
    base = 5.0 + rng.normal(0, 0.05, size=(3, 16))
    nll = {"prediff": base, "uniform_bidir": base + 0.002 * np.array([[1], [-1], [0.5]]), "scratch": base + 0.3}
    curves = {"prediff": _curve(7.0, 5.0), "uniform_bidir": _curve(7.0, 5.0), "scratch": _curve(7.0, 5.3)}
    methods = {n: {"val_nll": float(v.mean()), "val_nll_per_seed": v.mean(1).tolist(), "bound": True,
                   "curves": [curves[n]] * 3} for n, v in nll.items()}
    stored = {"preset": "cpu", "config": {"adapt": {"steps": 500}},
              "results": {"methods": methods, "per_window_nll": {n: v.tolist() for n, v in nll.items()},
                          "data": {"tokenizer_vocab": 1024}, "speed": {}, "threshold": {"value": [1.0] * 3}},
              "claims": [{"id": "hybrid_beats_uniform_bidirectional", "holds": True, "verdict": "reproduced"}]}
    (tmp_path / "results.json").write_text(json.dumps(stored))
    out = {cid: (before, c) for cid, before, c in rejudge(tmp_path)}
    before, hyb = out["hybrid_beats_uniform_bidirectional"]
    # the bootstrap-era "reproduced": a t-interval around 0 that excludes the study's log(28.7 / 34.1)
    assert before == "reproduced" and v(hyb) == ("inconclusive", "effect_excluded")
    assert hyb.seed_ref == "003_59f6a69613976956.txt:44"
    before, thr = out["ar_init_reaches_threshold_faster_than_scratch"]
    assert before == "-" and v(thr) == ("reproduced", None) and thr.evidence["scratch_steps"] == ">= 500, >= 500, >= 500"
    assert main([str(tmp_path)]) == 0
