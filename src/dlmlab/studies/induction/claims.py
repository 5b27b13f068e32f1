"""The study's claims, each computed from the per-model measurements (``analyse_model`` dicts).

``models`` maps "ar_L2" / "dlm_L3" ... to the measurement dict.  Thresholds are fixed here,
before any run, and stated in each claim.  A claim needing models the preset did not train
(e.g. no L = 1) has ``holds = None``.

Verdicts (see :mod:`dlmlab.report.claims`): a claim that holds is reproduced; a part that fails is
inconclusive / precondition when the model it is about never learned induction (headline forward accuracy
below ``NO_INDUCTION``, the level :func:`two_layers_needed` uses for "does not do induction"; for the
head-set ablation: no model reaches its ``min_base``), otherwise contradicted (the mechanism is absent, or
points the other way, while the model does the task).  Models the preset did not train: not_run.
"""

from __future__ import annotations

from dlmlab.report import Claim, claim
from dlmlab.report.claims import REPRODUCED, Judgement, combine, contradicted, not_run, precondition_failed

PREV_NEXT_THRESHOLD = 0.5  # a layer-0 previous/next-token head has formed: its score exceeds this
INDUCTION_THRESHOLD = 0.3  # an induction head (layer >= 1) attends from target to source with weight > this

DEEP_MIN = 2
NO_INDUCTION = 0.2  # headline forward accuracy below this: the model does not do induction (two_layers_needed's low)


def _acc(m: dict, direction: str, context: str) -> float | None:
    return m["accuracy"][direction][context]


def _deep(models: dict, objective: str) -> dict[int, dict]:
    return {m["n_layers"]: m for k, m in models.items() if m["objective"] == objective and m["n_layers"] >= DEEP_MIN}


def _pairs(models: dict) -> dict[int, tuple[dict, dict]]:
    ar, dlm = _deep(models, "ar"), _deep(models, "dlm")
    return {L: (ar[L], dlm[L]) for L in sorted(ar) if L in dlm}


def _learned(m: dict) -> bool:
    """The model does induction: its headline forward accuracy (AR: left context; DLM: both) >= NO_INDUCTION
    (no accuracy measured: assumed, so a failing part reads contradicted rather than excused)."""
    a = _headline(m) if "accuracy" in m else None
    return a is None or a >= NO_INDUCTION


def _name(m: dict) -> str:
    return f"{m['objective']}_L{m['n_layers']}"


def _part(ok: bool, models: list[dict], failed: str) -> Judgement:
    """Reproduced when ``ok``; else precondition when none of ``models`` does induction, else contradicted."""
    if ok:
        return REPRODUCED
    if not any(_learned(m) for m in models):
        return precondition_failed(" and ".join(_name(m) for m in models) + " below forward accuracy "
                                   f"{NO_INDUCTION} (no induction)")
    return contradicted(failed)


def _verdict(holds: bool | None, parts: list[Judgement], why_not_run: str) -> Judgement:
    return not_run(why_not_run) if holds is None else combine(parts)


def dlm_beats_ar_with_both_sides(models: dict) -> Claim:
    pairs = _pairs(models)
    ev, ok, parts = {}, [], []
    for L, (ar, dlm) in pairs.items():
        a = 0.5 * (_acc(ar, "forward", "left") + _acc(ar, "reverse", "left"))
        d = 0.5 * (_acc(dlm, "forward", "both") + _acc(dlm, "reverse", "both"))
        ev[f"L{L}_ar_mean_fwd_rev"], ev[f"L{L}_dlm_both_mean_fwd_rev"] = a, d
        ev[f"L{L}_ar_forward"], ev[f"L{L}_dlm_both_forward"] = _acc(ar, "forward", "left"), _acc(dlm, "forward", "both")
        ok.append(d > a)
        parts.append(_part(d > a, [ar, dlm], f"L{L}: DLM both {d:.3f} <= AR {a:.3f}"))
    holds = all(ok) if ok else None
    return claim("dlm_beats_ar_with_both_sides",
                 "With both sides visible, the DLM's induction accuracy averaged over forward and reverse targets "
                 "exceeds the matched AR model's (every depth >= 2)",
                 holds, judgement=_verdict(holds, parts, "no AR / DLM pair of depth >= 2"), **ev)


def left_only_not_better_than_ar(models: dict, tol: float = 0.05) -> Claim:
    pairs = _pairs(models)
    ev, ok, parts = {"tolerance": tol}, [], []
    for L, (ar, dlm) in pairs.items():
        ev[f"L{L}_dlm_left_forward"], ev[f"L{L}_ar_forward"] = _acc(dlm, "forward", "left"), _acc(ar, "forward", "left")
        ok.append(_acc(dlm, "forward", "left") <= _acc(ar, "forward", "left") + tol)
        parts.append(_part(ok[-1], [ar, dlm], f"L{L}: DLM left {_acc(dlm, 'forward', 'left'):.3f} > AR "
                                              f"{_acc(ar, 'forward', 'left'):.3f} + {tol}"))
    holds = all(ok) if ok else None
    return claim("left_only_not_better_than_ar",
                 f"Restricted to left context, the DLM's forward induction accuracy is not above the AR model's "
                 f"(+{tol}) at every depth >= 2", holds,
                 judgement=_verdict(holds, parts, "no AR / DLM pair of depth >= 2"), **ev)


def both_approx_left_plus_right(models: dict, lo: float = 0.8, hi: float = 1.25) -> Claim:
    ev, ok, parts = {"range": [lo, hi], "baseline": "target's whole half masked (no cue locates the source)"}, [], []
    for L, m in _deep(models, "dlm").items():
        for d in ("forward", "reverse"):
            g = m["gains"][d]
            ev[f"L{L}_{d}_gain_left"], ev[f"L{L}_{d}_gain_right"] = g["left"], g["right"]
            ev[f"L{L}_{d}_gain_both"], ev[f"L{L}_{d}_ratio"] = g["both"], g["ratio"]
            ok.append(g["left"] + g["right"] > 0 and lo <= g["ratio"] <= hi)
            parts.append(_part(ok[-1], [m], f"L{L} {d}: ratio {g['ratio']}, gain left + right "
                                            f"{g['left'] + g['right']:.3g}"))
    return claim("both_approx_left_plus_right",
                 f"On the correct token's log-probability gain over a no-source baseline (the target's half masked), "
                 f"gain(both) / (gain(left) + gain(right)) lies in [{lo}, {hi}] (forward and reverse, every DLM with "
                 f"depth >= 2)", all(ok) if ok else None,
                 judgement=_verdict(all(ok) if ok else None, parts, "no DLM of depth >= 2"), **ev)


def _headline(m: dict) -> float:
    return _acc(m, "forward", "left") if m["objective"] == "ar" else _acc(m, "forward", "both")


def two_layers_needed(models: dict, low: float = 0.2, gain: float = 0.3) -> Claim:
    ev, ok, parts = {"low": low, "gain": gain}, [], []
    for obj in ("ar", "dlm"):
        one = [m for m in models.values() if m["objective"] == obj and m["n_layers"] == 1]
        deep = _deep(models, obj)
        if not one or not deep:
            continue
        a1 = _headline(one[0])
        best = max(_headline(m) for m in deep.values())
        ev[f"{obj}_L1"], ev[f"{obj}_best_deep"] = a1, best
        ok.append(a1 < low and best >= a1 + gain)
        if ok[-1]:
            parts.append(REPRODUCED)
        elif a1 >= low:  # one layer does induction: the claim's first half is false
            parts.append(contradicted(f"{obj}: one layer reaches {a1:.3f} >= {low}"))
        elif best < low:  # no depth learned the task
            parts.append(precondition_failed(f"{obj}: best depth >= 2 reaches {best:.3f} < {low} (no induction)"))
        else:
            parts.append(contradicted(f"{obj}: >= 2 layers gain {best - a1:.3f} < {gain}"))
    holds = all(ok) if len(ok) == 2 else None
    return claim("two_layers_needed",
                 f"One attention layer does not do induction (forward accuracy < {low}) while >= 2 layers gain "
                 f">= {gain} (AR and DLM)", holds,
                 judgement=_verdict(holds, parts, "needs AR and DLM models of depth 1 and >= 2"), **ev)


def _best(row) -> tuple[int, float]:
    h = max(range(len(row)), key=lambda i: row[i])
    return h, float(row[h])


def _peak(m: dict, name: str) -> tuple[float | None, int | None]:
    """(largest value, its step) of a checkpoint curve of ``m["emergence"]["curves"]`` (None if absent)."""
    curve = m.get("emergence", {}).get("curves", {}).get(name)
    if not curve:
        return None, None
    step, val = max(curve, key=lambda sv: sv[1])
    return val, step


def prev_and_next_token_heads_in_layer0(models: dict, thr: float = PREV_NEXT_THRESHOLD) -> Claim:
    ev, ok = {"threshold": thr, "convention": "mean attention from position i to i-1 (i+1) over all rows and all "
              "queries that have that neighbour (T-1 of T; TransformerLens averages over all T queries, i.e. this "
              "times (T-1)/T); inputs: the evaluation sequences with 15% of positions masked"}, []
    parts = []
    for L, m in _deep(models, "dlm").items():
        hp, sp = _best(m["prev_token_scores"][0])
        hn, sn = _best(m["next_token_scores"][0])
        ev[f"L{L}_prev_head"], ev[f"L{L}_prev_score"], ev[f"L{L}_next_head"], ev[f"L{L}_next_score"] = hp, sp, hn, sn
        if "prev_token_scores_init" in m:
            ev[f"L{L}_init_best_prev"] = _best(m["prev_token_scores_init"][0])[1]
            ev[f"L{L}_init_best_next"] = _best(m["next_token_scores_init"][0])[1]
        if "prev_token_scores_text" in m:
            ev[f"L{L}_text_prev_score"] = _best(m["prev_token_scores_text"][0])[1]
            ev[f"L{L}_text_next_score"] = _best(m["next_token_scores_text"][0])[1]
        for name in ("prev", "next"):
            ev[f"L{L}_peak_{name}_over_training"], ev[f"L{L}_peak_{name}_step"] = _peak(m, f"{name}_layer0")
        ok.append(sp >= thr and sn >= thr and hp != hn)
        parts.append(_part(ok[-1], [m], f"L{L}: best prev head {hp} ({sp:.3f}), next head {hn} ({sn:.3f})"))
    holds = all(ok) if ok else None
    return claim("prev_and_next_token_heads_in_layer0",
                 f"Layer 0 of every DLM (depth >= 2) has a previous-token head and a different next-token head "
                 f"(mean attention to the neighbour >= {thr}; control: the same heads at initialisation)",
                 holds, judgement=_verdict(holds, parts, "no DLM of depth >= 2"), **ev)


def induction_heads_ablation_drop(models: dict, min_base: float = 0.5, min_drop: float = 0.2) -> Claim:
    ev, ok, parts, deep = {"min_base_accuracy": min_base, "min_drop": min_drop}, [], [], 0
    for key, m in sorted(models.items()):
        if m["n_layers"] < DEEP_MIN:
            continue
        deep += 1
        t = m["induction_set_ablation"]
        ev[f"{key}_base"], ev[f"{key}_heads"] = t["base"], ["L{}H{}".format(*h) for h in t["heads"]]
        ev[f"{key}_threshold"] = t["threshold"]
        ev[f"{key}_set_drop"], ev[f"{key}_random_p95"] = t["drop"], t["random_p95"]
        ev[f"{key}_n_random"] = len(t["random_drops"])
        if t["base"] >= min_base:
            ok.append(bool(t["heads"]) and t["drop"] >= min_drop and t["drop"] > t["random_p95"])
            parts.append(REPRODUCED if ok[-1] else contradicted(
                f"{key}: heads {ev[f'{key}_heads']}, drop {t['drop']} vs random p95 {t['random_p95']}"))
    if ok:
        holds, judgement = all(ok), combine(parts)
    elif deep:  # models were trained but none does induction: nothing to ablate, nothing evaluated
        holds, judgement = None, precondition_failed(f"no model reaches forward accuracy {min_base} (none does "
                                                      "induction)")
    else:
        holds, judgement = None, not_run("no model of depth >= 2")
    return claim("induction_heads_ablation_drop",
                 f"Mean-ablating the set of induction heads (layer >= 1, induction score above the stated threshold) "
                 f"lowers forward accuracy by >= {min_drop} and by more than the 95th percentile of random head sets "
                 f"of the same size from the same layers, in every model that does induction (accuracy >= {min_base})",
                 holds, judgement=judgement, **ev)


def mask_rate_probe_r2(models: dict, thr: float = 0.8) -> Claim:
    ev, vals, ok = {"threshold": thr, "point": "blocks.0.resid_post (after the first attention layer)"}, [], []
    parts = []
    for L, m in _deep(models, "dlm").items():
        pr = m["probe"]
        ev[f"L{L}_t_range"] = pr.get("t_range")
        ev[f"L{L}_r2"], ev[f"L{L}_embed_r2"] = pr["r2"][1], pr["r2"][0]
        ev[f"L{L}_shuffled_label_r2"], ev[f"L{L}_pooled_r2"] = pr["r2_control"][1], pr["r2_pooled"][1]
        ev[f"L{L}_peak_r2_over_training"], ev[f"L{L}_peak_r2_step"] = _peak(m, "probe_r2_block0")
        vals.append(pr["r2"][1])
        ok.append(pr["r2"][1] >= thr and pr["r2"][1] > pr["r2_control"][1])
        parts.append(REPRODUCED if ok[-1] else contradicted(
            f"L{L}: R^2 {pr['r2'][1]:.3f} (shuffled-label control {pr['r2_control'][1]:.3f})"))
    return claim("mask_rate_probe_r2",
                 f"A ridge probe reads the global mask fraction from single positions after the first attention layer "
                 f"with held-out R^2 >= {thr}, over the mask rates the DLM was trained on (control: the probe refit on "
                 f"labels shuffled across sequences; value = min over DLMs)", all(ok) if ok else None,
                 judgement=_verdict(all(ok) if ok else None, parts, "no DLM of depth >= 2"),
                 value=min(vals) if vals else None, **ev)


def mask_rate_patch_raises_entropy(models: dict) -> Claim:
    ev, ok, parts = {}, [], []
    for L, m in _deep(models, "dlm").items():
        pt = m["patch"]
        ev[f"L{L}_rates"] = [pt["low"], pt["high"]]
        ev[f"L{L}_delta_entropy"], ev[f"L{L}_random_p95"] = pt["delta"], pt["random_p95"]
        ev[f"L{L}_n_random"], ev[f"L{L}_entropy_clean"] = len(pt["random_deltas"]), pt["entropy_clean"]
        ok.append(pt["delta"] > 0 and pt["delta"] > pt["random_p95"])
        parts.append(REPRODUCED if ok[-1] else contradicted(
            f"L{L}: entropy change {pt['delta']:.3g} (random p95 {pt['random_p95']:.3g})"))
    return claim("mask_rate_patch_raises_entropy",
                 "Adding the sequence-level difference-of-means shift (mean blocks.0.resid_post at the high rate minus "
                 "at the low rate, over positions unmasked in both; fitted on other sequences) at every position of a "
                 "low-rate input raises the entropy at its masked positions above the 95th percentile of equal-norm "
                 "random shifts (every DLM with depth >= 2)", all(ok) if ok else None,
                 judgement=_verdict(all(ok) if ok else None, parts, "no DLM of depth >= 2"), **ev)


def local_window_sensitivity(models: dict, min_drop: float = 0.2) -> Claim:
    ev, ok, parts = {"min_drop": min_drop}, [], []
    for L, m in _deep(models, "dlm").items():
        lw = m["local_window"]
        d = {k: lw["none"] - lw[k] for k in ("pm1", "pm2_only", "pm1_pm2", "far2")}
        ev[f"L{L}_target_only"] = lw["none"]
        ev.update({f"L{L}_drop_{k}": v for k, v in d.items()})
        ok.append(d["pm1_pm2"] >= min_drop and d["pm1"] > d["far2"] and d["pm2_only"] > d["far2"])
        if ok[-1]:
            parts.append(REPRODUCED)
        elif lw["none"] < NO_INDUCTION:  # accuracy with the target alone masked: nothing to drop from
            parts.append(precondition_failed(f"L{L}: forward accuracy {lw['none']:.3f} < {NO_INDUCTION} at the low "
                                             "mask rate (no induction)"))
        else:
            parts.append(contradicted(f"L{L}: drops " + ", ".join(f"{k} {v:.3f}" for k, v in d.items())))
    return claim("local_window_sensitivity",
                 f"At a low global mask rate, masking the +-1 and +-2 neighbours of a target lowers DLM forward "
                 f"induction accuracy by >= {min_drop}, and masking +-1 alone and +-2 alone each lower it more than "
                 f"masking two far positions of the same half (control)", all(ok) if ok else None,
                 judgement=_verdict(all(ok) if ok else None, parts, "no DLM of depth >= 2"), **ev)


def q_and_k_composition_in_induction_heads(models: dict) -> Claim:
    ev, ok, parts = {}, [], []
    for L, m in _deep(models, "dlm").items():
        c = m.get("composition_into_top_head")
        if c is None:
            continue
        hp, hn = _best(m["prev_token_scores"][0])[0], _best(m["next_token_scores"][0])[0]
        ev[f"L{L}_induction_head"] = "L{}H{}".format(*m["top_induction_head"])
        ev[f"L{L}_prev_next_heads"] = [hp, hn]
        for kind in ("Q", "K"):
            row = c[kind][0]
            others = [row[h] for h in range(len(row)) if h not in (hp, hn)]
            mine = 0.5 * (row[hp] + row[hn])
            ev[f"L{L}_{kind}_prev_next_mean"], ev[f"L{L}_{kind}_max_other"] = mine, max(others) if others else None
            if others:
                ok.append(mine > max(others))
                parts.append(_part(ok[-1], [m], f"L{L} {kind}: prev/next {mine:.3f} <= other {max(others):.3f}"))
    return claim("q_and_k_composition_in_induction_heads",
                 "The top induction head's Q- and K-composition scores (TransformerLens convention, folded model) with "
                 "the layer-0 previous/next-token heads (their mean) exceed those with every other layer-0 head "
                 "(every DLM with depth >= 2)", all(ok) if ok else None,
                 judgement=_verdict(all(ok) if ok else None, parts, "no composition scores computed"), **ev)


def all_claims(models: dict) -> list[Claim]:
    return [dlm_beats_ar_with_both_sides(models), left_only_not_better_than_ar(models),
            both_approx_left_plus_right(models), two_layers_needed(models),
            prev_and_next_token_heads_in_layer0(models), induction_heads_ablation_drop(models),
            mask_rate_probe_r2(models), mask_rate_patch_raises_entropy(models), local_window_sensitivity(models),
            q_and_k_composition_in_induction_heads(models)]


CLAIM_IDS = ("dlm_beats_ar_with_both_sides", "left_only_not_better_than_ar", "both_approx_left_plus_right",
             "two_layers_needed", "prev_and_next_token_heads_in_layer0", "induction_heads_ablation_drop",
             "mask_rate_probe_r2", "mask_rate_patch_raises_entropy", "local_window_sensitivity",
             "q_and_k_composition_in_induction_heads")
