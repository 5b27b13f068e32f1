"""The study's claims, each computed from the per-model measurements (``analyse_model`` dicts).

``models`` maps "ar_L2" / "dlm_L3" ... to the measurement dict; its ``objective`` is the model's label (``ar`` /
``dlm``, which pairs the models) and its ``context`` the context of the headline accuracy, written from the
objective (``both`` for the masked-diffusion model, ``left`` for the next-token one). Thresholds are fixed here,
before any run, and stated in each claim; docs/induction.md quotes the study's sentence beside each definition.

Statistics (issue 34).  Each preset trains ``seeds`` training seeds per model (cpu: 2); the measurements of
seeds after the first are in ``m["seed_runs"]``.  An accuracy claim's interval is over training seeds
(``report.intervals.hierarchical_ci`` of [seeds, sequences]: Student-t over the seed means, valid for the seed
count; with one seed it falls back to sequences, ``t-items``, evaluation noise only).  A mechanism claim (one
value per model against a fixed level or control) is judged on every training seed and must hold in each
(:func:`_each_seed`).  Random controls (shift directions) are judged by a permutation p-value
(``report.intervals.control_test``, >= 200 draws).  Verdicts (:mod:`dlmlab.report.claims`):

* precondition: every claim first checks that the model it is about *learned* the task
  (``report.claims.learned``: forward induction accuracy at least 90% of the way from chance to perfect;
  AR: left context, DLM: both sides); weight-based claims also check that the folded (LayerNorm-free) model
  still learned it;
* a mechanism value that points the study's way (beats its control) but falls short of the
  claim's fixed level: inconclusive / ``scale``, with the value and its control;
* an interval that spans the level: ``underpowered`` (or ``effect_excluded`` where the study reports an
  effect size that the interval excludes; the study reports none of these quantities as a number here).

A claim needing models the preset did not train (e.g. no L = 1) is not run.
"""

from __future__ import annotations

import math

from dlmlab.analysis.emergence import rise_width
from dlmlab.report import Claim, claim
from dlmlab.report.claims import (CONTROL_ALPHA, REPRODUCED, Judgement, combine, contradicted, interval_verdict,
                                  learned, not_run, precondition_failed, short_of_scale, underpowered,
                                  verdict_from_control)
from dlmlab.report.intervals import Interval, control_test, hierarchical_ci, mean_ci
from dlmlab.studies.induction.train import OBJECTIVES

PREV_NEXT_THRESHOLD = 0.5  # a layer-0 previous/next-token head has formed: its score exceeds this
INDUCTION_THRESHOLD = 0.3  # an induction head (layer >= 1) attends from target to source with weight > this
LOCAL_THRESHOLD = PREV_NEXT_THRESHOLD  # a layer-0 head attends to the local context (+-1 or +-2) with >= this
CEILING = 0.95  # forward accuracy at or above this leaves no room for a both-sides advantage
MIN_SIDE_SHARE = 0.2  # "each side contributes": gain(side) >= this fraction of gain(both)
ABRUPT_FRACTION = 0.1  # "abrupt": the accuracy rises from 10% to 90% of its rise within this fraction of the run

DEEP_MIN = 2
NO_INDUCTION = 0.2  # forward accuracy below this: the one-layer model "does not do induction" (two_layers_needed)
RMSE_LEVEL = math.sqrt((1 - 0.82) / 12)  # 0.122: the probe RMSE (mask-rate units) that the summary's lowest R^2,
# 0.82, implies for rates uniform on [0, 1]; fixed a priori (issue 34), independent of the label range
PROBE_FULL_R2 = 0.82  # the summary's lowest R^2, judged on the probe over the full range [0, 1]


# -- helpers ---------------------------------------------------------------------------------------
def _acc(m: dict, direction: str, context: str) -> float | None:
    return m["accuracy"][direction][context]


def _headline(m: dict) -> float:
    return _acc(m, "forward", _headline_context(m))


def _headline_context(m: dict) -> str:
    return m["context"]


def _deep(models: dict, objective: str) -> dict[int, dict]:
    return {m["n_layers"]: m for k, m in models.items() if m["objective"] == objective and m["n_layers"] >= DEEP_MIN}


def _pairs(models: dict) -> dict[int, tuple[dict, dict]]:
    ar, dlm = _deep(models, "ar"), _deep(models, "dlm")
    return {L: (ar[L], dlm[L]) for L in sorted(ar) if L in dlm}


def _name(m: dict) -> str:
    return f"{m['objective']}_L{m['n_layers']}" + (f"_s{m['seed_index']}" if m.get("seed_index") else "")


def _chance(m: dict) -> float:
    """Chance accuracy of the induction targets (1 / number of ids they are drawn from); 0 if not recorded."""
    return float(m.get("chance", 0.0))


def _learned(m: dict, acc: float | None = None, what: str | None = None) -> Judgement | None:
    """None when ``m`` learned induction (its headline forward accuracy, or ``acc``, at the learned level),
    else a precondition verdict naming the numbers."""
    a = _headline(m) if acc is None else acc
    if a is None:
        return precondition_failed(f"{_name(m)}: no accuracy measured")
    return learned(a, _chance(m), what or f"{_name(m)} forward")


def _per_seq(m: dict, direction: str, context: str) -> list[float] | None:
    return (m.get("accuracy_per_seq", {}).get(direction) or {}).get(context)


def _runs(m: dict) -> list[dict]:
    """The measurements of every training seed of a model: seed 0's (``m``), then ``m["seed_runs"]`` (shallow
    copies carrying ``seed_index``, which :func:`_name` shows: ``dlm_L2_s1``)."""
    return [m, *({**r, "seed_index": s} for s, r in enumerate(m.get("seed_runs", []), 1))]


def _items_iv(values: list[float] | list[list[float]] | None, mean: float | None = None,
              bounds: tuple[float, float] | None = None) -> Interval:
    """Interval of a per-sequence quantity: ``values`` [N] (one seed: t over sequences) or [S, N] (S >= 2
    training seeds: Student-t over the seed means); without per-sequence values: no interval; ``bounds``: the
    quantity's range (an accuracy's (0, 1)), to which the interval is clipped."""
    if values is not None and values and not isinstance(values[0], list):
        values = [values]
    if values is not None and all(v is not None and len(v) >= 2 for v in values) \
            and len({len(v) for v in values}) == 1:
        return hierarchical_ci(values, bounds=bounds)
    m = float("nan") if mean is None else float(mean)
    return Interval(m, float("nan"), float("nan"), 1, "none", unit="items")


def _fmt(iv: Interval) -> str:
    return f"{iv.fmt()}, {'training seeds' if iv.unit == 'seeds' else '1 training seed'}"


def _learned_all(m: dict, what: str | None = None) -> Judgement | None:
    """The first seed of ``m`` that did not learn induction (its precondition verdict), else None."""
    for r in _runs(m):
        pre = _learned(r, what=what or f"{_name(r)} forward")
        if pre is not None:
            return pre
    return None


def _paired(runs_a: list[dict], runs_b: list[dict], get_a, get_b) -> list[list[float]] | None:
    """[S, N] per-sequence differences a - b, seed by seed; None when a seed lacks per-sequence values."""
    out = []
    for ra, rb in zip(runs_a, runs_b):
        a, b = get_a(ra), get_b(rb)
        if not a or not b or len(a) != len(b):
            return None
        out.append([x - y for x, y in zip(a, b)])
    return out or None


def _each_seed(fn, models: dict, **kw) -> Claim:
    """``fn(models_of_seed, **kw)`` for every training seed (the models' ``seed_runs``); the claim must hold in
    each seed (``report.claims.combine``); seed s > 0's evidence is prefixed ``seed{s}_``."""
    S = min((len(_runs(m)) for m in models.values()), default=1)
    cs = [fn({k: _runs(m)[s] for k, m in models.items()}, **kw) for s in range(S)]
    if S == 1:
        return cs[0]
    ev = {**cs[0].evidence, "training_seeds": S}
    for s, c in enumerate(cs[1:], 1):
        ev.update({f"seed{s}_{k}": v for k, v in c.evidence.items()})
    parts = [c.judgement for c in cs]  # details name seed s > 0's models ``..._s<s>``
    return _make(cs[0].id, cs[0].statement + f" (in each of {S} training seeds)", parts, cs[0].detail, **ev)


def _make(id: str, statement: str, parts: list[Judgement], why_not_run: str, **ev) -> Claim:
    """The claim from its parts (``combine``); ``holds`` None when nothing was evaluated (all parts not run /
    preconditions)."""
    if not parts:
        return claim(id, statement, None, judgement=not_run(why_not_run), **ev)
    j = combine(parts)
    if j.verdict == "reproduced":
        holds = True
    elif all(p.reason in ("precondition", "not_run") for p in parts) and j.reason in ("precondition", "not_run"):
        holds = None
    else:
        holds = False
    if j.reason == "not_run":
        holds = None
    return claim(id, statement, holds, judgement=j, **ev)


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


def _fold_ok(m: dict) -> Judgement | None:
    """Precondition of a weight-based claim: the folded (LayerNorm-free) model still learned the task."""
    f = m.get("fold")
    if not f or f.get("folded_accuracy") is None:
        return precondition_failed(f"{_name(m)}: no folded-model accuracy measured")
    return learned(f["folded_accuracy"], _chance(m), f"{_name(m)} folded (LayerNorm-free) model")


# -- accuracy claims ---------------------------------------------------------------------------------
def few_ids_choice(ar: dict, ceiling: float = CEILING) -> str | None:
    """The id count of the both-sides comparison, chosen on the AR alone (issue 34), before any DLM number is
    read: the largest count of ``ar["few_ids"]`` at which the AR's forward accuracy (mean over its training
    seeds) is below ``ceiling`` (the evaluation nearest the standard one that leaves room for an advantage);
    None when the AR is at its ceiling at every count (or none was measured)."""
    runs = _runs(ar)
    counts = sorted((k for k in ar.get("few_ids") or {}), key=int, reverse=True)
    for k in counts:
        if all(k in (r.get("few_ids") or {}) for r in runs) and \
                sum(r["few_ids"][k]["accuracy"] for r in runs) / len(runs) < ceiling:
            return k
    return None


def dlm_beats_ar_with_both_sides(models: dict, ceiling: float = CEILING) -> Claim:
    """Forward targets only (an AR model cannot see a reverse target's source, so reverse accuracy would
    decide the comparison by construction), on repeats drawn from few distinct ids: the id count is the
    largest at which the AR is below ``ceiling`` (:func:`few_ids_choice`, the AR alone); both models must
    have learned induction on the standard (distinct-id) evaluation."""
    ev, parts = {"ceiling": ceiling, "targets": "forward"}, []
    for L, (ar, dlm) in _pairs(models).items():
        a, d = _acc(ar, "forward", "left"), _acc(dlm, "forward", "both")
        ev[f"L{L}_distinct_ids_ar_forward"], ev[f"L{L}_distinct_ids_dlm_both_forward"] = a, d
        ev[f"L{L}_few_ids_ar_forward"] = {k: v["accuracy"] for k, v in (ar.get("few_ids") or {}).items()}
        pre = _learned_all(ar) or _learned_all(dlm)
        if pre is not None:
            parts.append(pre)
            continue
        k = few_ids_choice(ar, ceiling)
        ev[f"L{L}_ids_chosen_on_ar"] = k
        if k is None:
            parts.append(precondition_failed(f"L{L}: AR forward accuracy >= ceiling {ceiling} at every id count "
                                             f"{sorted(ar.get('few_ids') or {}, key=int)}: no room for a both-sides "
                                             "advantage"))
            continue
        ev[f"L{L}_few_ids_dlm_both_forward"] = {k: dlm["few_ids"][k]["accuracy"]} if dlm.get("few_ids") else None
        diffs = _paired(_runs(dlm), _runs(ar), lambda r: (r.get("few_ids") or {}).get(k, {}).get("per_seq"),
                        lambda r: r["few_ids"][k]["per_seq"])
        iv = _items_iv(diffs, None if diffs else float("nan"))
        ev[f"L{L}_dlm_minus_ar"] = _fmt(iv)
        ev[f"L{L}_dlm_minus_ar_interval"] = iv.as_dict()
        parts.append(interval_verdict(iv, +1, 0.0, f"L{L} DLM both - AR forward accuracy on {k} ids"))
    return _make("dlm_beats_ar_with_both_sides",
                 f"With both neighbours visible, the DLM's forward induction accuracy exceeds the matched AR model's "
                 f"(paired by evaluation sequence, interval over training seeds) on repeats drawn from few distinct "
                 f"ids, the id count chosen on the AR alone as the largest at which the AR is below {ceiling}; both "
                 f"models learned induction; every depth >= 2", parts, "no AR / DLM pair of depth >= 2", **ev)


def left_only_not_better_than_ar(models: dict, tol: float = 0.05) -> Claim:
    ev, parts = {"tolerance": tol}, []
    for L, (ar, dlm) in _pairs(models).items():
        a, d = _acc(ar, "forward", "left"), _acc(dlm, "forward", "left")
        ev[f"L{L}_dlm_left_forward"], ev[f"L{L}_ar_forward"] = d, a
        pre = _learned_all(ar) or _learned_all(dlm)
        if pre is not None:
            parts.append(pre)
            continue
        diffs = _paired(_runs(dlm), _runs(ar), lambda r: _per_seq(r, "forward", "left"),
                        lambda r: _per_seq(r, "forward", "left"))
        iv = _items_iv(diffs, d - a)
        ev[f"L{L}_dlm_left_minus_ar"] = _fmt(iv)
        parts.append(interval_verdict(iv, -1, tol, f"L{L} DLM left - AR forward accuracy"))
    return _make("left_only_not_better_than_ar",
                 f"Restricted to left context, the DLM's forward induction accuracy is not above the AR model's "
                 f"(+{tol}; paired interval over training seeds below it) at every depth >= 2", parts,
                 "no AR / DLM pair of depth >= 2", **ev)


def _ratio_iv(both: list[float], left: list[float], right: list[float]) -> Interval:
    """Delta-method t-interval of mean(both) / mean(left + right) over sequences."""
    s = [a + b for a, b in zip(left, right)]
    ms = sum(s) / len(s)
    if ms == 0:
        return Interval(float("nan"), float("nan"), float("nan"), len(s), "none", unit="items")
    r = (sum(both) / len(both)) / ms
    iv = mean_ci([(b - r * x) / ms for b, x in zip(both, s)], unit="items")
    return Interval(r, r + iv.lo, r + iv.hi, iv.n, "t-items (delta method)", unit="items")


def both_approx_left_plus_right(models: dict, lo: float = 0.8, hi: float = 1.25,
                                min_share: float = MIN_SIDE_SHARE) -> Claim:
    ev = {"range": [lo, hi], "min_side_share": min_share,
          "baseline": "target's whole half masked (no cue locates the source)"}
    parts = []
    for L, m in _deep(models, "dlm").items():
        pre = _learned_all(m)
        runs = _runs(m)
        for d in ("forward", "reverse"):
            g = m["gains"][d]
            ev[f"L{L}_{d}_gain_left"], ev[f"L{L}_{d}_gain_right"] = g["left"], g["right"]
            ev[f"L{L}_{d}_gain_both"], ev[f"L{L}_{d}_ratio"] = g["both"], g["ratio"]
            if pre is not None:
                parts.append(pre)
                continue
            pss = [r["gains"][d].get("per_seq") for r in runs]
            ok = all(pss)
            for side in ("left", "right"):  # each side contributes at least min_share of the both-sides gain
                share = ([[x - min_share * y for x, y in zip(ps[side], ps["both"])] for ps in pss] if ok else None)
                iv = _items_iv(share, g[side] - min_share * g["both"])
                ev[f"L{L}_{d}_{side}_minus_share_of_both"] = _fmt(iv)
                parts.append(interval_verdict(iv, +1, 0.0, f"L{L} {d}: gain({side}) - {min_share} gain(both)"))
            if len(runs) >= 2:  # Student-t over the training seeds' ratios
                riv = mean_ci([r["gains"][d]["ratio"] for r in runs], unit="seeds")
            else:
                riv = _ratio_iv(pss[0]["both"], pss[0]["left"], pss[0]["right"]) if ok else _items_iv(None, g["ratio"])
            ev[f"L{L}_{d}_ratio_interval"] = _fmt(riv)
            if riv.n < 2 or not math.isfinite(riv.lo):
                parts.append(underpowered(f"L{L} {d}: ratio {g['ratio']} without an interval"))
            elif lo <= riv.lo and riv.hi <= hi:
                parts.append(REPRODUCED)
            elif riv.hi < lo or riv.lo > hi:
                parts.append(contradicted(f"L{L} {d}: ratio {riv.fmt()} outside [{lo}, {hi}]"))
            else:
                parts.append(underpowered(f"L{L} {d}: ratio {riv.fmt()} overlaps the edge of [{lo}, {hi}]"))
    return _make("both_approx_left_plus_right",
                 f"On the correct token's log-probability gain over a no-source baseline (the target's half masked), "
                 f"each side contributes (gain(left), gain(right) >= {min_share} gain(both)) and "
                 f"gain(both) / (gain(left) + gain(right)) lies in [{lo}, {hi}] (forward and reverse, every DLM with "
                 f"depth >= 2; intervals over training seeds)", parts, "no DLM of depth >= 2", **ev)


def two_layers_needed(models: dict, low: float = NO_INDUCTION, gain: float = 0.3) -> Claim:
    """Judged for each objective with a one-layer model and a deeper one (cpu: the DLM only; the one-layer AR is
    not trained there, see docs "Budget")."""
    ev, parts = {"low": low, "gain": gain}, []
    for obj in OBJECTIVES:
        one = [m for m in models.values() if m["objective"] == obj and m["n_layers"] == 1]
        deep = _deep(models, obj)
        if not one or not deep:
            continue
        a1 = _headline(one[0])
        best = max(deep.values(), key=_headline)
        ev[f"{obj}_L1"], ev[f"{obj}_best_deep"] = a1, _headline(best)
        pre = _learned_all(best)
        if pre is not None:
            parts.append(pre)
            continue
        iv = _items_iv([_per_seq(r, "forward", _headline_context(r)) for r in _runs(one[0])], a1, bounds=(0, 1))
        ev[f"{obj}_L1_interval"] = _fmt(iv)
        j = interval_verdict(iv, -1, low, f"{obj} one-layer forward accuracy")
        if j.verdict == "reproduced" and _headline(best) < a1 + gain:
            j = contradicted(f"{obj}: >= 2 layers gain {_headline(best) - a1:.3f} < {gain}")
        parts.append(j)
    return _make("two_layers_needed",
                 f"One attention layer does not do induction (forward accuracy < {low}, interval over training "
                 f"seeds) while >= 2 layers learn it (and gain >= {gain}) (each objective trained at depth 1)", parts,
                 "needs a model of depth 1 and one of depth >= 2 of the same objective", **ev)


# -- mechanism claims (judged in each training seed: _each_seed) ------------------------------------
def _prev_and_next_token_heads_in_layer0_one(models: dict, thr: float = PREV_NEXT_THRESHOLD) -> Claim:
    ev = {"threshold": thr, "convention": "mean attention from position i to i-1 (i+1) over all rows and all "
          "queries that have that neighbour (T-1 of T; TransformerLens averages over all T queries, i.e. this "
          "times (T-1)/T); inputs: the evaluation sequences with 15% of positions masked"}
    parts = []
    for L, m in _deep(models, "dlm").items():
        hp, sp = _best(m["prev_token_scores"][0])
        hn, sn = _best(m["next_token_scores"][0])
        ev[f"L{L}_prev_head"], ev[f"L{L}_prev_score"], ev[f"L{L}_next_head"], ev[f"L{L}_next_score"] = hp, sp, hn, sn
        ip = _best(m["prev_token_scores_init"][0])[1] if "prev_token_scores_init" in m else None
        inn = _best(m["next_token_scores_init"][0])[1] if "next_token_scores_init" in m else None
        ev[f"L{L}_init_best_prev"], ev[f"L{L}_init_best_next"] = ip, inn
        if "prev_token_scores_text" in m:
            ev[f"L{L}_text_prev_score"] = _best(m["prev_token_scores_text"][0])[1]
            ev[f"L{L}_text_next_score"] = _best(m["next_token_scores_text"][0])[1]
        for name in ("prev", "next"):
            ev[f"L{L}_peak_{name}_over_training"], ev[f"L{L}_peak_{name}_step"] = _peak(m, f"{name}_layer0")
        pre = _learned(m)
        if pre is not None:
            parts.append(pre)
        elif sp >= thr and sn >= thr and hp != hn:
            parts.append(REPRODUCED)
        elif hp != hn and ip is not None and inn is not None and sp > ip and sn > inn:
            parts.append(short_of_scale(f"L{L}: prev head {hp} {sp:.3f}, next head {hn} {sn:.3f} beat their values "
                                        f"at initialisation ({ip:.3f}, {inn:.3f}) but not both reach {thr} "
                                        f"(this training seed)"))
        else:
            parts.append(contradicted(f"L{L}: best prev head {hp} ({sp:.3f}), next head {hn} ({sn:.3f}); at "
                                      f"initialisation {ip}, {inn}"))
    return _make("prev_and_next_token_heads_in_layer0",
                 f"Layer 0 of every DLM (depth >= 2) has a previous-token head and a different next-token head "
                 f"(mean attention to the neighbour >= {thr}; control: the same heads at initialisation)",
                 parts, "no DLM of depth >= 2", **ev)


def _control(values: dict, value_key: str, draws_key: str) -> tuple:
    """(ControlTest, note) of a stored measurement: its own test when stored, else one computed from its draws
    (an older results.json with 20 draws: the note says so)."""
    c = values.get("control")
    draws = values.get(draws_key) or []
    if not draws:
        return None, ""
    if c:
        return control_test(values[value_key], draws, 1, min_draws=c["n_draws"]), ""
    return control_test(values[value_key], draws, 1, min_draws=1), f" (only {len(draws)} draws stored)"


def induction_heads_ablation_drop(models: dict, min_drop: float = 0.2) -> Claim:
    """Issue 34: the permutation over the few other same-size sets of a small pool cannot reach p <= 0.05 (its
    smallest attainable p is 1 / (1 + sets)); judged instead by paired per-sequence intervals over training
    seeds: the set's drop exceeds ``min_drop``, and exceeds the drop of the other same-size set whose ablation
    hurts most (chosen on the same sequences, which favours the control).  The permutation is evidence only."""
    ev, parts = {"min_drop": min_drop}, []
    for key, m in sorted(models.items()):
        if m["n_layers"] < DEEP_MIN:
            continue
        t = m["induction_set_ablation"]
        ev[f"{key}_base"], ev[f"{key}_heads"] = t["base"], ["L{}H{}".format(*h) for h in t["heads"]]
        ev[f"{key}_threshold"] = t["threshold"]
        ev[f"{key}_set_drop"], ev[f"{key}_random_p95"] = t["drop"], t["random_p95"]
        ev[f"{key}_n_other_sets"], ev[f"{key}_exhaustive"] = len(t["random_drops"]), t.get("exhaustive", False)
        if (t.get("control") or {}).get("p") is not None:
            ev[f"{key}_permutation_p"], ev[f"{key}_permutation_min_p"] = t["control"]["p"], t.get("min_p")
        pre = _learned_all(m)
        if pre is not None:
            parts.append(pre)
            continue
        runs = [r["induction_set_ablation"] for r in _runs(m)]
        if not all(r["heads"] for r in runs):
            parts.append(contradicted(f"{key}: a seed has no head of layers >= 1 above induction score "
                                      f"{t['threshold']}"))
            continue
        ps = [r.get("per_seq") for r in runs]
        if not all(ps):
            parts.append(underpowered(f"{key}: no other same-size set of layers >= 1 (or no per-sequence "
                                      "accuracies stored) in some seed"))
            continue
        ev[f"{key}_best_other_sets"] = [["L{}H{}".format(*h) for h in x["best_other_set"]] for x in ps]
        drop = _items_iv([[b - a for b, a in zip(x["base"], x["induction"])] for x in ps])
        excess = _items_iv([[o - a for o, a in zip(x["best_other"], x["induction"])] for x in ps])
        ev[f"{key}_drop_interval"], ev[f"{key}_drop_minus_best_other_interval"] = _fmt(drop), _fmt(excess)
        parts.append(interval_verdict(drop, +1, min_drop, f"{key}: set drop"))
        parts.append(interval_verdict(excess, +1, 0.0, f"{key}: set drop - best other set's drop"))
    return _make("induction_heads_ablation_drop",
                 f"Mean-ablating the set of induction heads (layer >= 1, induction score above the stated threshold) "
                 f"lowers forward accuracy by more than {min_drop} and by more than the other same-size set of "
                 f"layers >= 1 whose ablation lowers it most (paired per-sequence intervals over training seeds), "
                 f"in every model of depth >= 2 that learned induction", parts, "no model of depth >= 2", **ev)


def _probe_one(models: dict, rmse_level: float = RMSE_LEVEL, full_r2: float = PROBE_FULL_R2) -> Claim:
    ev = {"rmse_level": rmse_level, "full_range_r2_level": full_r2,
          "point": "blocks.0.resid_post (after the first attention layer)",
          "comparable_to_summary": "the full-range R^2 (assuming the study's rates span [0, 1]; the summary does "
                                   "not state its range); the RMSE is range-independent"}
    vals, parts = [], []
    for L, m in _deep(models, "dlm").items():
        pr = m["probe"]
        r2, ctl = pr["r2"][1], pr["r2_control"][1]
        rmse, rmse_ctl = (pr.get("rmse") or [None, None])[1], pr.get("rmse_control")
        ev[f"L{L}_t_range"] = pr.get("t_range")
        ev[f"L{L}_r2"], ev[f"L{L}_embed_r2"] = r2, pr["r2"][0]
        ev[f"L{L}_rmse"], ev[f"L{L}_shuffled_label_rmse"] = rmse, rmse_ctl
        ev[f"L{L}_shuffled_label_r2"], ev[f"L{L}_pooled_r2"] = ctl, pr["r2_pooled"][1]
        full = m.get("probe_full_range")
        fr2 = full["r2"][1] if full else None
        if full:
            ev[f"L{L}_full_range_r2"], ev[f"L{L}_full_range_t_range"] = fr2, full["t_range"]
            ev[f"L{L}_full_range_shuffled_label_r2"] = full["r2_control"][1]
        ev[f"L{L}_peak_r2_over_training"], ev[f"L{L}_peak_r2_step"] = _peak(m, "probe_r2_block0")
        vals.append(rmse)
        pre = _learned(m)
        if pre is not None:
            parts.append(pre)
        elif rmse is None or fr2 is None:
            parts.append(underpowered(f"L{L}: no RMSE / full-range probe stored (an older run)"))
        elif rmse <= rmse_level and fr2 >= full_r2 and r2 > ctl:
            parts.append(REPRODUCED)
        elif r2 > ctl:
            parts.append(short_of_scale(f"L{L}: RMSE {rmse:.3f} (level {rmse_level:.3f}), full-range R^2 {fr2:.3f} "
                                        f"(level {full_r2}); R^2 {r2:.3f} above the shuffled-label control "
                                        f"{ctl:.3f}"))
        else:
            parts.append(contradicted(f"L{L}: R^2 {r2:.3f} <= shuffled-label control {ctl:.3f}"))
    ok = [v for v in vals if v is not None]
    return _make("mask_rate_probe_r2",
                 f"A ridge probe reads the global mask fraction from single positions after the first attention layer: "
                 f"held-out RMSE <= {rmse_level:.3f} (mask-rate units; the RMSE of R^2 0.82 for rates uniform on "
                 f"[0, 1]) over the DLM's training rates, and held-out R^2 >= {full_r2} over the full range [0, 1] "
                 f"(control: the probe refit on labels shuffled across sequences; value = largest RMSE over DLMs)",
                 parts, "no DLM of depth >= 2", value=max(ok) if ok else None, **ev)


def mask_rate_probe_r2(models: dict, **kw) -> Claim:
    return _each_seed(_probe_one, models, **kw)


def _mask_rate_patch_raises_entropy_one(models: dict) -> Claim:
    ev, parts = {}, []
    for L, m in _deep(models, "dlm").items():
        pt = m["patch"]
        ev[f"L{L}_rates"] = [pt["low"], pt["high"]]
        ev[f"L{L}_delta_entropy"], ev[f"L{L}_random_p95"] = pt["delta"], pt["random_p95"]
        ev[f"L{L}_n_random"], ev[f"L{L}_entropy_clean"] = len(pt["random_deltas"]), pt["entropy_clean"]
        pre = _learned(m)
        if pre is not None:
            parts.append(pre)
            continue
        n = len(pt["random_deltas"])
        ct = control_test(pt["delta"], pt["random_deltas"], 1, min_draws=min(n, 200))
        ev[f"L{L}_control"] = ct.as_dict()
        if pt["delta"] <= 0:
            parts.append(contradicted(f"L{L}: entropy change {pt['delta']:.3g} <= 0 ({ct.fmt()})"))
        elif n < 200:
            parts.append(underpowered(f"L{L}: {ct.fmt()}: fewer than 200 random shifts"))
        else:
            parts.append(verdict_from_control(ct, f"L{L} entropy change"))
    return _make("mask_rate_patch_raises_entropy",
                 "Adding the sequence-level difference-of-means shift (mean blocks.0.resid_post at the high rate minus "
                 "at the low rate, over positions unmasked in both; fitted on other sequences) at every position of a "
                 "low-rate input raises the entropy at its masked positions more than equal-norm random shifts "
                 "(permutation p <= 0.05 over >= 200 shifts; every DLM with depth >= 2)", parts,
                 "no DLM of depth >= 2", **ev)


def _local_window_sensitivity_one(models: dict, min_drop: float = 0.2) -> Claim:
    ev, parts = {"min_drop": min_drop}, []
    for L, m in _deep(models, "dlm").items():
        lw = m["local_window"]
        d = {k: lw["none"] - lw[k] for k in ("pm1", "pm2_only", "pm1_pm2", "far2")}
        ev[f"L{L}_target_only"] = lw["none"]
        ev.update({f"L{L}_drop_{k}": v for k, v in d.items()})
        pre = _learned(m)
        if pre is not None:
            parts.append(pre)
            continue
        beats = d["pm1"] > d["far2"] and d["pm2_only"] > d["far2"]
        text = ", ".join(f"{k} {v:.3f}" for k, v in d.items())
        if beats and d["pm1_pm2"] >= min_drop:
            parts.append(REPRODUCED)
        elif beats and d["pm1_pm2"] > d["far2"]:
            parts.append(short_of_scale(f"L{L}: drops {text}: the local ones beat the far control but +-1 and +-2 "
                                        f"together lower accuracy by less than {min_drop} (this training seed)"))
        else:
            parts.append(contradicted(f"L{L}: drops {text}"))
    return _make("local_window_sensitivity",
                 f"At a low global mask rate, masking the +-1 and +-2 neighbours of a target lowers DLM forward "
                 f"induction accuracy by >= {min_drop}, and masking +-1 alone and +-2 alone each lower it more than "
                 f"masking two far positions of the same half (control)", parts, "no DLM of depth >= 2", **ev)


def local_heads(m: dict, thr: float = LOCAL_THRESHOLD) -> list[int]:
    """Layer-0 heads that attend to the local context: mean attention to the position at offset -2, -1, +1 or
    +2 >= ``thr`` for at least one of them (measurements without the +-2 scores: +-1 only)."""
    loc = m.get("local_offset_scores") or {"-1": m["prev_token_scores"], "1": m["next_token_scores"]}
    H = len(m["prev_token_scores"][0])
    return [h for h in range(H) if max(float(s[0][h]) for s in loc.values()) >= thr]


def _q_and_k_composition_in_induction_heads_one(models: dict, thr: float = LOCAL_THRESHOLD) -> Claim:
    ev, parts = {"local_threshold": thr, "local_offsets": [-2, -1, 1, 2]}, []
    for L, m in _deep(models, "dlm").items():
        c = m.get("composition_into_top_head")
        if c is None:
            continue
        f = m.get("fold") or {}
        ev[f"L{L}_accuracy"], ev[f"L{L}_folded_accuracy"] = f.get("accuracy"), f.get("folded_accuracy")
        pre = _learned(m) or _fold_ok(m)
        loc = local_heads(m, thr)
        ev[f"L{L}_induction_head"] = "L{}H{}".format(*m["top_induction_head"])
        ev[f"L{L}_local_heads"] = loc
        hp, hn = _best(m["prev_token_scores"][0])[0], _best(m["next_token_scores"][0])[0]
        ev[f"L{L}_old_definition_prev_next_heads"] = [hp, hn]
        if pre is not None:
            parts.append(pre)
            continue
        H = len(c["Q"][0])
        others = [h for h in range(H) if h not in loc]
        if not loc:
            parts.append(precondition_failed(f"L{L}: no layer-0 head attends to +-1 or +-2 with >= {thr}"))
            continue
        if not others:
            parts.append(precondition_failed(f"L{L}: every layer-0 head attends locally: no other head to compare"))
            continue
        init = m.get("composition_into_top_head_init")
        for kind in ("Q", "K"):
            row = c[kind][0]
            mine, other = sum(row[h] for h in loc) / len(loc), max(row[h] for h in others)
            ev[f"L{L}_{kind}_local_mean"], ev[f"L{L}_{kind}_max_other"] = mine, other
            if init is None:
                parts.append(underpowered(f"L{L} {kind}: no composition scores at initialisation (an older run)"))
                continue
            base = max(init[kind][0])  # the untrained model's largest score of any layer-0 head into the head
            ev[f"L{L}_{kind}_init_max"] = base
            if mine > other and mine > base:
                parts.append(REPRODUCED)
            else:
                parts.append(contradicted(f"L{L} {kind}: local heads {loc} {mine:.3f}; other heads' max {other:.3f}; "
                                          f"untrained model's max {base:.3f}"))
    return _make("q_and_k_composition_in_induction_heads",
                 f"The top induction head's Q- and K-composition scores (TransformerLens convention, on the folded "
                 f"LayerNorm-free model, which must still do the task) with the layer-0 heads of the local context "
                 f"(attention >= {thr} to a position at -2, -1, +1 or +2; their mean) exceed those with every other "
                 f"layer-0 head and the largest score of any layer-0 head of the same model at initialisation "
                 f"(control; every DLM with depth >= 2)", parts, "no composition scores computed", **ev)


def _induction_emerges_abruptly_one(models: dict, frac: float = ABRUPT_FRACTION) -> Claim:
    """The forward-accuracy curve over checkpoints rises from 10% to 90% of its rise within ``frac`` of the run;
    the step window ("around 8-24k steps") is judged only where the preset states it (the study's recipe)."""
    ev, parts = {"max_width_fraction": frac, "rise": "10% -> 90% of the way from the first checkpoint to the "
                 "maximum"}, []
    for key, m in sorted(models.items()):
        em = m.get("emergence")
        if m["n_layers"] < DEEP_MIN or not em or not em.get("curve"):
            continue
        rise = em.get("rise") or rise_width(em["curve"])
        steps = em.get("run_steps") or em["curve"][-1][0]
        window = em.get("study_step_window") or []
        ev[f"{key}_rise_10_90"] = [rise["step_lo"], rise["step_hi"]]
        ev[f"{key}_width"], ev[f"{key}_run_steps"] = rise["width"], steps
        ev[f"{key}_midpoint_step"] = em.get("midpoint_step")
        pre = _learned(m)
        if pre is not None:
            parts.append(pre)
            continue
        if rise["resolution"] is not None and rise["resolution"] > frac * steps:
            parts.append(precondition_failed(f"{key}: checkpoints every {rise['resolution']} steps cannot resolve a "
                                             f"rise within {frac} of {steps} steps"))
            continue
        j = REPRODUCED if rise["width"] is not None and rise["width"] <= frac * steps else contradicted(
            f"{key}: rises over {rise['width']} steps (10%-90%) > {frac} x {steps}")
        if window and j.verdict == "reproduced":
            mid = em.get("midpoint_step")
            if mid is None or not window[0] <= mid <= window[1]:
                j = contradicted(f"{key}: midpoint step {mid} outside the study's {window[0]}-{window[1]}")
        parts.append(j)
    if parts and not any(m.get("emergence", {}).get("study_step_window") for m in models.values()):
        ev["step_window"] = ("not judged: this preset's budget (steps, batch, model size) differs from the study's, "
                             "so its steps do not map to the study's 8-24k; the observed midpoint steps are reported")
    return _make("induction_emerges_abruptly",
                 f"Induction (forward accuracy) emerges abruptly: its rise from 10% to 90% spans at most {frac} of the "
                 f"training run, in every model of depth >= 2 that learned it (the study's window of 8-24k steps "
                 f"judged only at the study's recipe)", parts, "no checkpoint curve of a model of depth >= 2", **ev)


def all_claims(models: dict) -> list[Claim]:
    return [dlm_beats_ar_with_both_sides(models), left_only_not_better_than_ar(models),
            both_approx_left_plus_right(models), two_layers_needed(models),
            prev_and_next_token_heads_in_layer0(models), induction_heads_ablation_drop(models),
            mask_rate_probe_r2(models), mask_rate_patch_raises_entropy(models), local_window_sensitivity(models),
            q_and_k_composition_in_induction_heads(models), induction_emerges_abruptly(models)]


CLAIM_IDS = ("dlm_beats_ar_with_both_sides", "left_only_not_better_than_ar", "both_approx_left_plus_right",
             "two_layers_needed", "prev_and_next_token_heads_in_layer0", "induction_heads_ablation_drop",
             "mask_rate_probe_r2", "mask_rate_patch_raises_entropy", "local_window_sensitivity",
             "q_and_k_composition_in_induction_heads", "induction_emerges_abruptly",
             "mask_rate_steering")  # the last: steering.steering_claim, judged on the deepest DLM during decoding


def mask_rate_patch_raises_entropy(models: dict, **kw) -> Claim:
    return _each_seed(_mask_rate_patch_raises_entropy_one, models, **kw)


def local_window_sensitivity(models: dict, **kw) -> Claim:
    return _each_seed(_local_window_sensitivity_one, models, **kw)


def q_and_k_composition_in_induction_heads(models: dict, **kw) -> Claim:
    return _each_seed(_q_and_k_composition_in_induction_heads_one, models, **kw)


def induction_emerges_abruptly(models: dict, **kw) -> Claim:
    return _each_seed(_induction_emerges_abruptly_one, models, **kw)


def prev_and_next_token_heads_in_layer0(models: dict, **kw) -> Claim:
    return _each_seed(_prev_and_next_token_heads_in_layer0_one, models, **kw)
