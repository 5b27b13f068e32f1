"""The study's claims, each computed from the per-model measurements (``analyse_model`` dicts).

``models`` maps "ar_L2" / "dlm_L3" ... to the measurement dict.  Thresholds are fixed here,
before any run, and stated in each claim.  A claim needing models the preset did not train
(e.g. no L = 1) has ``holds = None``.
"""

from __future__ import annotations

from dlmlab.report import Claim, claim

DEEP_MIN = 2


def _acc(m: dict, direction: str, context: str) -> float | None:
    return m["accuracy"][direction][context]


def _deep(models: dict, objective: str) -> dict[int, dict]:
    return {m["n_layers"]: m for k, m in models.items() if m["objective"] == objective and m["n_layers"] >= DEEP_MIN}


def _pairs(models: dict) -> dict[int, tuple[dict, dict]]:
    ar, dlm = _deep(models, "ar"), _deep(models, "dlm")
    return {L: (ar[L], dlm[L]) for L in sorted(ar) if L in dlm}


def dlm_beats_ar_with_both_sides(models: dict) -> Claim:
    pairs = _pairs(models)
    ev, ok = {}, []
    for L, (ar, dlm) in pairs.items():
        a = 0.5 * (_acc(ar, "forward", "left") + _acc(ar, "reverse", "left"))
        d = 0.5 * (_acc(dlm, "forward", "both") + _acc(dlm, "reverse", "both"))
        ev[f"L{L}_ar_mean_fwd_rev"], ev[f"L{L}_dlm_both_mean_fwd_rev"] = a, d
        ev[f"L{L}_ar_forward"], ev[f"L{L}_dlm_both_forward"] = _acc(ar, "forward", "left"), _acc(dlm, "forward", "both")
        ok.append(d > a)
    return claim("dlm_beats_ar_with_both_sides",
                 "With both sides visible, the DLM's induction accuracy averaged over forward and reverse targets "
                 "exceeds the matched AR model's (every depth >= 2)",
                 all(ok) if ok else None, **ev)


def left_only_not_better_than_ar(models: dict, tol: float = 0.05) -> Claim:
    pairs = _pairs(models)
    ev, ok = {"tolerance": tol}, []
    for L, (ar, dlm) in pairs.items():
        ev[f"L{L}_dlm_left_forward"], ev[f"L{L}_ar_forward"] = _acc(dlm, "forward", "left"), _acc(ar, "forward", "left")
        ok.append(_acc(dlm, "forward", "left") <= _acc(ar, "forward", "left") + tol)
    return claim("left_only_not_better_than_ar",
                 f"Restricted to left context, the DLM's forward induction accuracy is not above the AR model's "
                 f"(+{tol}) at every depth >= 2", all(ok) if ok else None, **ev)


def both_approx_left_plus_right(models: dict, tol: float = 0.1) -> Claim:
    ev, ok = {"tolerance": tol}, []
    for L, m in _deep(models, "dlm").items():
        for d in ("forward", "reverse"):
            left, right, both = (_acc(m, d, c) for c in ("left", "right", "both"))
            pred = min(1.0, left + right)
            ev[f"L{L}_{d}_both"], ev[f"L{L}_{d}_min1_left_plus_right"] = both, pred
            ev[f"L{L}_{d}_noisy_or"] = 1 - (1 - left) * (1 - right)
            ok.append(abs(both - pred) <= tol)
    return claim("both_approx_left_plus_right",
                 f"DLM accuracy with both sides equals min(1, left-only + right-only) within {tol} "
                 "(both directions, every depth >= 2)", all(ok) if ok else None, **ev)


def _headline(m: dict) -> float:
    return _acc(m, "forward", "left") if m["objective"] == "ar" else _acc(m, "forward", "both")


def two_layers_needed(models: dict, low: float = 0.2, gain: float = 0.3) -> Claim:
    ev, ok = {"low": low, "gain": gain}, []
    for obj in ("ar", "dlm"):
        one = [m for m in models.values() if m["objective"] == obj and m["n_layers"] == 1]
        deep = _deep(models, obj)
        if not one or not deep:
            continue
        a1 = _headline(one[0])
        best = max(_headline(m) for m in deep.values())
        ev[f"{obj}_L1"], ev[f"{obj}_best_deep"] = a1, best
        ok.append(a1 < low and best >= a1 + gain)
    return claim("two_layers_needed",
                 f"One attention layer does not do induction (forward accuracy < {low}) while >= 2 layers gain "
                 f">= {gain} (AR and DLM)", all(ok) if len(ok) == 2 else None, **ev)


def prev_and_next_token_heads_in_layer0(models: dict, thr: float = 0.5) -> Claim:
    ev, ok = {"threshold": thr}, []
    for L, m in _deep(models, "dlm").items():
        prev, nxt = m["prev_token_scores"][0], m["next_token_scores"][0]
        hp = max(range(len(prev)), key=lambda h: prev[h])
        hn = max(range(len(nxt)), key=lambda h: nxt[h])
        ev[f"L{L}_best_prev_head"], ev[f"L{L}_prev_score"] = hp, prev[hp]
        ev[f"L{L}_best_next_head"], ev[f"L{L}_next_score"] = hn, nxt[hn]
        ok.append(prev[hp] >= thr and nxt[hn] >= thr and hp != hn)
    return claim("prev_and_next_token_heads_in_layer0",
                 f"Layer 0 of every DLM (depth >= 2) has a previous-token head and a different next-token head "
                 f"(attention to the neighbour >= {thr})", all(ok) if ok else None, **ev)


def induction_heads_ablation_drop(models: dict, min_base: float = 0.5, min_drop: float = 0.2) -> Claim:
    ev, ok = {"min_base_accuracy": min_base, "min_drop": min_drop}, []
    for key, m in sorted(models.items()):
        if m["n_layers"] < DEEP_MIN:
            continue
        base = m["ablation"]["base"]
        ev[f"{key}_base"], ev[f"{key}_top_head"] = base, "L{}H{}".format(*m["top_induction_head"])
        ev[f"{key}_mean_ablation_drop"] = m["top_induction_head_mean_drop"]
        if base >= min_base:
            ok.append(m["top_induction_head_mean_drop"] >= min_drop)
    return claim("induction_heads_ablation_drop",
                 f"Mean-ablating the top induction head (highest induction score, layer >= 1) lowers forward accuracy "
                 f"by >= {min_drop} in every model that does induction (accuracy >= {min_base})",
                 all(ok) if ok else None, **ev)


def mask_rate_probe_r2(models: dict, thr: float = 0.5) -> Claim:
    ev, vals, ok = {"threshold": thr}, [], []
    for L, m in _deep(models, "dlm").items():
        r2 = m["probe"]["r2"]
        best = max(r2[1:])
        ev[f"L{L}_embed_r2"], ev[f"L{L}_best_block_r2"] = r2[0], best
        vals.append(best)
        ok.append(best >= thr and best > r2[0])
    value = min(vals) if vals else None
    return claim("mask_rate_probe_r2",
                 f"A ridge probe reads the global mask fraction from single positions of the residual stream after "
                 f"attention with held-out R^2 >= {thr}, above the embedding's (value = min over DLMs of the best layer)",
                 all(ok) if ok else None, value=value, **ev)


def mask_rate_patch_raises_entropy(models: dict) -> Claim:
    ev, ok, rates = {}, [], set()
    for L, m in _deep(models, "dlm").items():
        pt = m["patch"]
        ev[f"L{L}_point"], ev[f"L{L}_delta_entropy"], ev[f"L{L}_delta_random"] = pt["point"], pt["delta"], pt["delta_random"]
        rates.add((pt.get("high"), pt.get("low")))
        ok.append(pt["delta"] > 0 and pt["delta"] > pt["delta_random"])
    high, low = rates.pop() if len(rates) == 1 else ("high", "low")
    return claim("mask_rate_patch_raises_entropy",
                 f"Patching the probe's mask-rate direction from a high- ({high}) into a low-corruption ({low}) input "
                 "raises the prediction entropy at masked positions, more than the same shift along a random direction",
                 all(ok) if ok else None, **ev)


def local_window_sensitivity(models: dict, min_drop: float = 0.2) -> Claim:
    ev, ok = {"min_drop": min_drop}, []
    for L, m in _deep(models, "dlm").items():
        lw = m["local_window"]
        d1, d2 = lw["none"] - lw["pm1"], lw["none"] - lw["pm2_only"]
        ev[f"L{L}_target_only"], ev[f"L{L}_drop_pm1"], ev[f"L{L}_drop_pm2_only"] = lw["none"], d1, d2
        ok.append(d1 >= min_drop and d1 > 2 * d2)
    return claim("local_window_sensitivity",
                 f"At a low global mask rate, masking the +-1 neighbours of a target lowers DLM forward induction "
                 f"accuracy by >= {min_drop} and by more than twice the drop from masking only the +-2 neighbours",
                 all(ok) if ok else None, **ev)


def all_claims(models: dict) -> list[Claim]:
    return [dlm_beats_ar_with_both_sides(models), left_only_not_better_than_ar(models),
            both_approx_left_plus_right(models), two_layers_needed(models),
            prev_and_next_token_heads_in_layer0(models), induction_heads_ablation_drop(models),
            mask_rate_probe_r2(models), mask_rate_patch_raises_entropy(models), local_window_sensitivity(models)]


CLAIM_IDS = ("dlm_beats_ar_with_both_sides", "left_only_not_better_than_ar", "both_approx_left_plus_right",
             "two_layers_needed", "prev_and_next_token_heads_in_layer0", "induction_heads_ablation_drop",
             "mask_rate_probe_r2", "mask_rate_patch_raises_entropy", "local_window_sensitivity")
