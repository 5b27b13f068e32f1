"""The state study's mechanism claims: probe-subspace ablation against a random subspace, readability vs causal
use (judged on the pretrained models), and Mamba's Conv1D ablation over seeds (see :mod:`.claims` for which
cells count and the verdicts)."""

from __future__ import annotations

import numpy as np

from dlmlab.report import Claim
from dlmlab.report.claims import (CONTROL_ALPHA, REPRODUCED, Judgement, combine, contradicted, interval_verdict,
                                  learned_level, not_run, precondition_failed, short_of_scale, underpowered)
from dlmlab.report.intervals import Interval, control_test, hierarchical_ci
from dlmlab.studies.state.seeds import SEED_REFS
from dlmlab.studies.state.claims_base import (ABLATION_MARGIN, CAUSAL_MARGIN, EQUIV_LEVEL, EQUIV_MARGIN,
                                              MIN_CONV_SEEDS, OOD_MIN_LEN, PREFIX, TOL, _chance_text, _judged,
                                              _none_counted, _not_learned_row, _split, best_block, budget_only,
                                              is_learned)


# ------------------------------------------------------------------------------------------ ablation claims
def _mean_drop(by_len: dict, lens) -> float:
    return float(np.mean([by_len[L]["drop"] for L in lens]))


def beats_control(value: float, draws, margin: float) -> tuple[str, dict]:
    """A drop against the distribution of its random control (>= 200 draws, :func:`control_test`): 'wins' when it
    beats the control (permutation p <= 0.05) and exceeds the draws' median by > ``margin``; 'short' when it beats
    the control but not by the margin (the study's way, short of the claim's level); 'loses' otherwise (issue 34:
    a value merely above the draws' median no longer counts as 'short')."""
    t = control_test(value, draws)
    beats = t.p <= CONTROL_ALPHA
    out = "wins" if beats and value > t.median + margin else "short" if beats else "loses"
    return out, t.as_dict()


def _most(outcomes: dict, what: str) -> Judgement:
    """Verdict of "in most cells" over {cell: 'wins' / 'short' / 'loses' / 'no_control'}: most win -> reproduced;
    most at least beat their control (win, or beat it short of the margin) -> inconclusive / scale; else
    contradicted.  'no_control' (a stored run without >= 200 draws there) counts as neither."""
    n = len(outcomes)
    wins = [k for k, o in outcomes.items() if o == "wins"]
    short = [k for k, o in outcomes.items() if o == "short"]
    if len(wins) > n / 2:
        return REPRODUCED
    if len(wins) + len(short) > n / 2:
        return short_of_scale(f"{what}: beats its control by the margin in {len(wins)} of {n} cells, beats it short "
                              f"of the margin in {len(short)} ({', '.join(short)})")
    nc = [k for k, o in outcomes.items() if o == "no_control"]
    return contradicted(f"{what}: probe subspace beats its random control in {len(wins) + len(short)} of {n} cells"
                        + (f" ({len(nc)} without >= 200 control draws)" if nc else ""))


def _ood_control(c: dict, lens: list) -> tuple[float, list[float]] | None:
    """(probe-subspace drop, [draws]) averaged over the unseen lengths ``lens`` from ``control_ood`` (the same
    random subspaces at every length, so a draw's mean over lengths is a draw of the mean); None when absent."""
    co = c.get("control_ood") or {}
    vals, draws = co.get("value_by_len", {}), co.get("draws_by_len", {})
    key = lambda L: L if L in vals else str(L)  # noqa: E731  (JSON keys are strings)
    if not lens or any(key(L) not in vals or key(L) not in draws for L in lens):
        return None
    return (float(np.mean([vals[key(L)] for L in lens])),
            np.mean([np.asarray(draws[key(L)], dtype=float) for L in lens], axis=0).tolist())


def direction_ablation(cells, margin: float = ABLATION_MARGIN, ood_min_len: int = OOD_MIN_LEN) -> Claim:
    st = (f"Projecting out the probe subspace (all class directions of the probe at the best block) drops accuracy "
          f"more than projecting out a random subspace of equal rank (by > {margin}) in most cells that learned "
          f"their task, both at the training length and (mean) at the unseen lengths >= {ood_min_len}, each against "
          f">= 200 random subspaces of equal rank (permutation p <= 0.05 and > {margin} above their median; beating "
          "them short of the margin -> scale; cells at chance at an unseen length do not count there)")
    cid = "probe_direction_ablation_drops_accuracy"
    ran = {f"{a}/{t}": c for (a, t), c in cells.items() if "ablation" in c}
    if not ran:
        return _judged(cid, st, not_run("no ablation was run"), reason="no ablation was run")
    got, lists = _split(ran)
    if not got:
        return _none_counted(cid, st, lists)
    per, at_chance_ood = {}, []
    for k, c in got.items():
        ab, L0 = c["ablation"], c["train_len"]
        ood = sorted(L for L in ab["probe_subspace"] if int(L) >= ood_min_len)
        ood_ok = [L for L in ood if c.get("above_chance_by_len", {}).get(L, False)]
        ps, rs = ab["probe_subspace"][L0]["drop"], ab["random_subspace"][L0]["drop"]
        row = {"rank": c.get("ablation_k"), "train": {"probe_subspace": ps, "random_subspace": rs,
                                                      "outcome": "no_control"}}
        if c.get("control"):  # the control's distribution (>= 200 random subspaces) decides at the training length
            ps = c["control"]["value"]
            out, test = beats_control(ps, c["control"]["draws"], margin)
            row["train"].update(probe_subspace=ps, random_subspace=test["control_median"], outcome=out,
                                control=test, n_seqs=c["control"].get("n_seqs"))
        row["train"]["wins"] = row["train"]["outcome"] == "wins"
        if ood_ok:
            ps, rs = _mean_drop(ab["probe_subspace"], ood_ok), _mean_drop(ab["random_subspace"], ood_ok)
            row["unseen"] = {"lengths": ood_ok, "probe_subspace": ps, "random_subspace": rs, "outcome": "no_control"}
            oc = _ood_control(c, ood_ok)
            if oc is not None:
                out, test = beats_control(oc[0], oc[1], margin)
                row["unseen"].update(probe_subspace=oc[0], random_subspace=test["control_median"], outcome=out,
                                     control=test, n_seqs=c["control_ood"].get("n_seqs"))
            row["unseen"]["wins"] = row["unseen"]["outcome"] == "wins"
        else:
            at_chance_ood.append(k)
        per[k] = row
    train_j = _most({k: r["train"]["outcome"] for k, r in per.items()}, "training length")
    ood_rows = {k: r for k, r in per.items() if "unseen" in r}
    if ood_rows:
        ood_j = _most({k: r["unseen"]["outcome"] for k, r in ood_rows.items()}, f"lengths >= {ood_min_len}")
    else:
        ood_j = precondition_failed(f"no learned cell above chance at lengths >= {ood_min_len}")
    text = ("drop probe subspace / median of its random control (train length; lengths >= %d): " % ood_min_len
            + "; ".join(f"{k} {r['train']['probe_subspace']:.2f}/{r['train']['random_subspace']:.2f}"
                        + (f", {r['unseen']['probe_subspace']:.2f}/{r['unseen']['random_subspace']:.2f}"
                           if "unseen" in r else "") for k, r in per.items()))
    return _judged(cid, st, combine([train_j, ood_j]), measured=text + _chance_text(lists), n_cells=len(per),
                   n_wins_train_len=sum(r["train"]["wins"] for r in per.values()), n_cells_unseen=len(ood_rows),
                   n_wins_unseen=sum(r["unseen"]["wins"] for r in ood_rows.values()),
                   at_chance_at_unseen_lengths=sorted(at_chance_ood), cells=per, **lists)


def causal_block(drops, control, margin: float = CAUSAL_MARGIN) -> int | None:
    """Layer (1 ... n) of the largest block ablation drop among those >= control + margin (earliest within
    TOL); ``drops`` / ``control`` [n_blocks]. None when no block's drop clears its control."""
    d, c = np.asarray(drops, dtype=float), np.asarray(control, dtype=float)
    ok = d >= c + margin
    if not ok.any():
        return None
    best = d[ok].max()
    return int(np.flatnonzero(ok & (d >= best - TOL))[0]) + 1


def _layer_controls(res: dict, margin: float) -> tuple[list[float], list[float], list[bool] | None]:
    """Per block (layer 1 ... n): the probe-subspace drop, its control value and, with ``layer_control`` (>= 200
    random subspaces per layer), whether the drop clears it (p <= 0.05 and >= median + ``margin``); without it
    (one random subspace per layer) None."""
    if res.get("layer_control"):
        lc = res["layer_control"][1:]
        tests = [control_test(x["value"], x["draws"]) for x in lc]
        return ([x["value"] for x in lc], [t.median for t in tests],
                [t.p <= CONTROL_ALPHA and x["value"] >= t.median + margin for x, t in zip(lc, tests)])
    return list(res["layer_ablation_drop"][1:]), list(res["layer_random_drop"][1:]), None


def split_row(res: dict, margin: float = CAUSAL_MARGIN) -> tuple[dict, Judgement]:
    """One model's readable block (best probe block), causal block (:func:`causal_block` of its per-layer
    probe-subspace ablation against the random subspace) and the verdict of "they differ": differ -> reproduced;
    same block -> contradicted; no causal block but a block whose drop exceeds its control (short of ``margin``) ->
    inconclusive / scale with the value and its control; no block above its control -> contradicted (absent)."""
    drops, ctrl, ok = _layer_controls(res, margin)
    if ok is None:
        causal = causal_block(drops, ctrl, margin)
    else:  # the largest drop among the blocks that clear their control's distribution (earliest within TOL)
        d = np.asarray(drops, dtype=float)
        okm = np.asarray(ok, dtype=bool)
        causal = int(np.flatnonzero(okm & (d >= d[okm].max() - TOL))[0]) + 1 if okm.any() else None
    excess = np.asarray(drops, dtype=float) - np.asarray(ctrl, dtype=float)
    j_best = int(np.argmax(excess))
    row = {"readable_block": best_block(res), "causal_block": causal, "block_drops": list(drops),
           "block_random_drops": list(ctrl), "largest_excess_block": j_best + 1, "largest_excess": float(excess[j_best])}
    if causal is not None:
        same = row["readable_block"] == causal
        return row, contradicted(f"readable and causal block both {causal}") if same else REPRODUCED
    what = (f"block {j_best + 1}: drop {drops[j_best]:.3f} vs random subspace {ctrl[j_best]:.3f}"
            f"{' (median of its draws)' if ok is not None else ''} (needs + {margin}"
            f"{' and p <= 0.05' if ok is not None else ''})")
    return row, short_of_scale(what) if excess[j_best] > 0 else contradicted(f"no block's drop exceeds its random "
                                                                            f"control ({what})")


def _pretrained_name(r: dict) -> str:
    return f"{r.get('arch', '?')}:{str(r.get('path', '?')).rstrip('/').rsplit('/', 1)[-1]}"


def _pretrained_learned(r: dict) -> tuple[bool, dict]:
    ch = (r.get("summary") or {}).get("chance")
    acc = {int(k): v for k, v in r.get("acc_by_len", {}).items()}
    a = acc.get(int(r.get("train_len", min(acc)))) if acc else None
    if a is None or ch is None:
        return False, {"status": "unknown"}
    lev = learned_level(ch)
    return a >= lev, {"acc": a, "chance": ch, "learned_level": lev, "status": "partial" if a >= ch + 0.1 else
                      "at chance"}


def readability_causality(pretrained, cells=None, margin: float = CAUSAL_MARGIN) -> Claim:
    st = ("Readability and causal use split, pronounced in pretrained models: in each pretrained checkpoint "
          "(Pythia-style GPT-NeoX and Mamba, fine-tuned on the task; each must have learned it) the block where the "
          "state is best linearly readable differs from the block whose probe-subspace ablation drops accuracy most "
          f"(a drop counts only when >= {margin} above projecting out a random subspace of equal rank there; with "
          ">= 200 such random subspaces per layer: permutation p <= 0.05 and >= their median + the margin); the toy "
          "cells are reported beside, not counted")
    cid = "readability_vs_causality_split"
    toy = _toy_split(cells or {}, margin)
    pre = [r for r in (pretrained or []) if "layer_ablation_drop" in r and "layer_random_drop" in r and "probes" in r]
    if not pre:
        return _judged(cid, st, not_run("no pretrained checkpoint was analysed"),
                       reason="no pretrained checkpoint was analysed (the preset's pretrained part is off)",
                       toy_cells=toy)
    per, parts, not_learned = {}, [], {}
    for r in pre:
        name = _pretrained_name(r)
        ok, info = _pretrained_learned(r)
        if not ok:
            not_learned[name] = info
            parts.append(precondition_failed(f"{name} not learned" + (
                f" (acc {info['acc']:.2f} < learned level {info['learned_level']:.2f})" if "acc" in info else "")))
            continue
        row, j = split_row(r, margin)
        per[name] = dict(row, verdict=j.label())
        parts.append(j)
    text = "; ".join(f"{k}: readable block {r['readable_block']}, causal block {r['causal_block']} (largest drop "
                     f"above control: block {r['largest_excess_block']}, {r['largest_excess']:+.3f})"
                     for k, r in per.items())
    text += "".join(f"; not learned: {k}" + (f" (acc {v['acc']:.2f} < {v['learned_level']:.2f})" if "acc" in v else "")
                    for k, v in not_learned.items())
    if toy.get("n_cells"):
        text += f"; toy cells (beside): split in {toy['n_split']} of {toy['n_cells']} with a causal block"
    return _judged(cid, st, combine(parts), measured=text, models=per, not_learned=not_learned, toy_cells=toy)


def _toy_split(cells, margin: float) -> dict:
    """The old definition, reported beside: readable vs causal block in the learned toy cells."""
    ran = {f"{a}/{t}": c for (a, t), c in cells.items() if "layer_ablation_drop" in c and "layer_random_drop" in c}
    got, lists = _split(ran)
    rows = {k: split_row(c, margin) for k, c in got.items()}
    with_causal = {k: r for k, (r, _) in rows.items() if r["causal_block"] is not None}
    return {"n_cells": len(with_causal), "n_split": sum(r["readable_block"] != r["causal_block"]
                                                        for r in with_causal.values()),
            "cells": {k: r for k, (r, _) in rows.items()}, "not_learned": sorted(lists["not_learned"])}


# ------------------------------------------------------------------------------------------ Conv1D
#: the summary's Conv1D drops (accuracy with - without Conv1D; :mod:`.seeds`)
CONV_EFFECT = SEED_REFS["conv1d_matters_for_prefix_not_dyck"].study_effect

def conv_drop_grid(with_runs: list[dict], without_runs: list[dict]) -> np.ndarray:
    """Per seed and evaluation item (sequence x length): accuracy with Conv1D - without -> [S, N]."""
    rows = []
    for a, b in zip(with_runs, without_runs):
        lens = sorted(a["acc_per_seq"], key=int)
        rows.append(np.concatenate([np.asarray(a["acc_per_seq"][L]) - np.asarray(b["acc_per_seq"][L]) for L in lens]))
    return np.stack(rows)


def equivalence_verdict(iv95: Interval, iv90: Interval, margin: float, what: str) -> Judgement:
    """"No effect" as an equivalence test (TOST): the 90% interval inside [-margin, +margin] -> reproduced; the
    95% interval wholly outside it (beyond +margin or below -margin) -> contradicted; else underpowered."""
    if iv95.n < 2:
        return underpowered(f"{what} {iv95.mean:.3g} from n={iv95.n}: no interval")
    if -margin < iv90.lo and iv90.hi < margin:
        return REPRODUCED
    if iv95.lo > margin or iv95.hi < -margin:
        return contradicted(f"{what} {iv95.fmt()} outside +-{margin:g}")
    return underpowered(f"{what} 90% interval [{iv90.lo:.3g}, {iv90.hi:.3g}] (n={iv90.n}) not inside +-{margin:g}")


def conv1d(conv_runs, min_seeds: int = MIN_CONV_SEEDS, margin: float = EQUIV_MARGIN, skipped=None) -> Claim:
    st = (f"Removing Mamba's Conv1D costs accuracy on Parity and S3 but not on Dyck: over >= {min_seeds} seeds "
          "(Mamba with Conv1D must have learned the task in every seed, else that task is a precondition failure), "
          "the 95% t-interval across seeds of the drop "
          "in mean accuracy over the evaluation lengths lies above 0 for Parity and S3, and for Dyck the 90% interval "
          f"lies inside the equivalence margin [-{margin:g}, +{margin:g}] (two one-sided tests)")
    cid = "conv1d_matters_for_prefix_not_dyck"
    per, seeds, ivs = {}, {}, {}
    budget = [t for t in PREFIX + ["dyck"] if f"mamba/{t}" in (skipped or {})]
    for t in PREFIX + ["dyck"]:
        if t in budget:
            continue
        s_with = sorted(s for v, tt, s in conv_runs if v == "mamba" and tt == t)
        s_both = [s for s in s_with if ("mamba-noconv", t, s) in conv_runs]
        seeds[t] = s_both
        if len(s_both) < min_seeds:
            continue
        withs = [conv_runs[("mamba", t, s)] for s in s_both]
        grid = conv_drop_grid(withs, [conv_runs[("mamba-noconv", t, s)] for s in s_both])
        ivs[t] = (hierarchical_ci(grid), hierarchical_ci(grid, level=EQUIV_LEVEL))
        mean_acc = lambda r: float(np.mean(list(r["acc_by_len"].values())))  # noqa: E731
        per[t] = dict(ivs[t][0].as_dict(), lo90=ivs[t][1].lo, hi90=ivs[t][1].hi, per_seed=grid.mean(1).tolist(),
                      acc_with=[mean_acc(r) for r in withs],
                      acc_without=[mean_acc(conv_runs[("mamba-noconv", t, s)]) for s in s_both],
                      with_learned=[is_learned(r) for r in withs],
                      not_learned={f"seed {s}": _not_learned_row(r) for s, r in zip(s_both, withs) if not is_learned(r)})
    if len(per) + len(budget) < 3 or not per:
        if budget and not per:
            return budget_only(cid, st, [f"mamba/{t}" for t in budget])
        return _judged(cid, st, not_run(f"fewer than {min_seeds} seeds with and without Conv1D"),
                       reason=f"Mamba with and without Conv1D needs >= {min_seeds} seeds on parity, s3 and dyck",
                       seeds=seeds)
    parts = [not_run(f"mamba/{t} with and without Conv1D not run (budget)") for t in budget]
    for t in [t for t in PREFIX + ["dyck"] if t in per]:
        bad = per[t]["not_learned"]
        if bad:  # the task's comparison needs a Mamba that learned it: no interval verdict without one
            parts.append(precondition_failed(f"Mamba with Conv1D did not learn {t} in {len(bad)} of "
                                             f"{len(seeds[t])} seeds (" + ", ".join(
                                                 f"{s}: acc {r.get('acc', float('nan')):.2f} < "
                                                 f"{r.get('learned_level', float('nan')):.2f}" for s, r in bad.items())
                                             + ")"))
        elif t == "dyck":
            parts.append(equivalence_verdict(*ivs[t], margin=margin, what="dyck drop"))
        else:
            parts.append(interval_verdict(ivs[t][0], +1, 0.0, what=f"{t} drop", study_effect=CONV_EFFECT[t]))
    text = "; ".join(f"{t}: drop {ivs[t][0].fmt()}, 90% [{v['lo90']:.3f}, {v['hi90']:.3f}] (accuracy with "
                     f"{np.mean(v['acc_with']):.3f}, without {np.mean(v['acc_without']):.3f}; with Conv1D learned in "
                     f"{sum(v['with_learned'])} of {len(v['with_learned'])} seeds)" for t, v in per.items())
    text += "".join(f"; {t}: not run (budget)" for t in budget)
    return _judged(cid, st, combine(parts), measured=text, equivalence_margin=margin, not_run_budget=budget,
                   **{f"{t}_drop": v for t, v in per.items()},
                   note="compares task accuracy itself; acc_with / acc_without are the mean accuracies over lengths "
                        f"per seed; the equivalence margin {margin:g} is fixed a priori (the smallest accuracy drop "
                        "this study counts as an effect, its causal margin)")


