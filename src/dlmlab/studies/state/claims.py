"""The state study's claims, computed from the per-cell measurements (never hand-set).

``cells`` maps ``(arch, task) -> cell dict`` (see :func:`dlmlab.studies.state.cells.run_cell`);
``conv_runs`` maps ``(variant, task, seed) -> run dict`` (Mamba with and without Conv1D, several
seeds; each with ``acc_per_seq``); ``pretrained`` is the list of pretrained-checkpoint results
(:func:`dlmlab.studies.state.pretrained.run_pretrained`).  A claim whose cells were not run (architecture
unavailable, task not in the preset) is inconclusive / not_run and says why.

Which cells count: only cells that *learned* their task (:func:`is_learned`: per-token accuracy at the
training length >= :func:`dlmlab.report.claims.learned_level` of the cell's chance level, i.e. 90% of the
way from the majority-label rate to perfect).  Every claim checks this precondition for every cell it names,
also when the claim holds: a cell it needs that did not learn makes it inconclusive / precondition (unless a
learned cell contradicts it), and the cells not counted are listed with their accuracy, chance and learned
level (``not_learned``; ``at_chance`` / ``partial`` split them by whether they rose above chance).

Verdicts (:mod:`dlmlab.report.claims`): a learned cell whose profile is not the one claimed -> contradicted;
a single-seed mechanism measurement (an ablation drop against its random control) that points the study's
way but falls short of the claim's fixed margin -> inconclusive / scale, with the value and its control;
the Conv1D claim is decided by t-intervals over seeds (``n`` shown), its Dyck half by an equivalence test.

Profiles are read over the blocks (layer 1 ... n_layers, the residual stream after each block); the
embedding (layer 0) enters only as the start of the first probe-accuracy jump.  The three layer-profile
descriptors of the study (:func:`profile_kinds`) are the ones the claims test: *early* (best block in the
first half), *late* (the largest probe-accuracy jump enters the last layer), *gradual* (gain >= 0.1 over the
blocks, no block adds more than 60% of it).
"""

from __future__ import annotations

import math

import numpy as np

from dlmlab.report import Claim, claim
from dlmlab.report.claims import (REPRODUCED, Judgement, combine, contradicted, interval_verdict, learned_level,
                                  not_run, precondition_failed, short_of_scale, underpowered)
from dlmlab.report.intervals import Interval, hierarchical_ci

LATE_ARCHS = ["mamba", "lstm"]  # the study's recurrent models (its claims name these two)
BESIDE_ARCHS = ["gru"]  # reported beside them, not counted
PREFIX = ["parity", "s3"]
TOL = 0.005  # best layer = earliest layer within TOL of the best probe accuracy
CAUSAL_MARGIN = 0.05  # a layer's ablation drop counts as causal when >= random control + this
ABLATION_MARGIN = 0.02  # probe-subspace drop must beat the random subspace's by more than this
OOD_MIN_LEN = 80  # "unseen lengths": evaluation lengths >= this
MIN_CONV_SEEDS = 3
GRADUAL_MIN_GAIN = 0.1  # "gradual": probe accuracy gains >= this from the first to the last block ...
GRADUAL_MAX_SHARE = 0.6  # ... and no single block adds more than this share of the gain
#: Conv1D "not for Dyck": the equivalence margin of the accuracy drop, fixed a priori (not from any result):
#: the smallest accuracy drop this study counts as an effect anywhere (CAUSAL_MARGIN, an ablation's causal margin)
EQUIV_MARGIN = CAUSAL_MARGIN
EQUIV_LEVEL = 0.90  # two one-sided tests at 5% each = the 90% interval inside [-margin, +margin]


# ------------------------------------------------------------------------------------------ profiles
def _acc(cell) -> list[float]:
    return [pr["accuracy"] for pr in cell["probes"]]


def _blocks(cell) -> np.ndarray:
    """Probe accuracy after each block (layer 1 ... n_layers)."""
    return np.asarray(_acc(cell)[1:], dtype=float)


def best_block(cell) -> int:
    """Layer index (1 ... n_layers) of the earliest block within TOL of the best block probe accuracy."""
    b = _blocks(cell)
    return int(np.flatnonzero(b >= b.max() - TOL)[0]) + 1


def largest_jump_layer(acc) -> int:
    """Layer (1 ... n) that the largest probe-accuracy increase ``acc[i] - acc[i-1]`` enters (earliest on ties)."""
    return int(np.argmax(np.diff(np.asarray(acc, dtype=float)))) + 1


def cells_n(c) -> int:
    return int(c["n_layers"])


def gradual_row(cell, max_share: float = GRADUAL_MAX_SHARE, min_gain: float = GRADUAL_MIN_GAIN) -> dict:
    """The "gradual" test of one profile: block gain (last - first block), the largest single-block step, and
    ``gradual`` = gain >= ``min_gain`` and no block step > ``max_share`` of the gain."""
    b = _blocks(cell)
    gain = float(b[-1] - b[0])
    step = float(np.diff(b).max()) if len(b) > 1 else 0.0
    return {"block_probe_accuracy": b.tolist(), "gain": gain, "max_step": step,
            "gradual": gain >= min_gain and step <= max_share * gain}


def is_early(cell) -> bool:
    return best_block(cell) <= cells_n(cell) // 2


def is_late(cell) -> bool:
    return largest_jump_layer(_acc(cell)) == cells_n(cell)


def profile_kinds(cell) -> list[str]:
    """The study's descriptors that a probe profile meets, in a fixed order: ``early`` (:func:`is_early`),
    ``late`` (:func:`is_late`), ``gradual`` (:func:`gradual_row`); a profile may meet several or none."""
    kinds = [("early", is_early(cell)), ("late", is_late(cell)), ("gradual", gradual_row(cell)["gradual"])]
    return [k for k, ok in kinds if ok]


def _p(xs) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


# ------------------------------------------------------------------------------------------ which cells count
def _train_acc_chance(c) -> tuple[float | None, float | None]:
    L = c.get("train_len")
    acc, ch = c.get("acc_by_len", {}), c.get("chance", {})
    if L is None:
        return None, None
    return acc.get(L, acc.get(str(L))), ch.get(L, ch.get(str(L)))


def is_learned(c) -> bool:
    """The precondition of every claim: accuracy at the training length >= ``learned_level(chance)`` (90% of
    the way from chance to perfect).  Hand-built cells without accuracies use their ``learned`` flag."""
    acc, ch = _train_acc_chance(c)
    if acc is not None and ch is not None:
        return bool(math.isfinite(acc) and acc >= learned_level(ch))
    return bool(c.get("learned")) and bool(c.get("above_chance", True))


def _not_learned_row(c) -> dict:
    """Why a cell is not counted: accuracy, chance and learned level at the training length, whether it rose above
    chance, and its last training-batch accuracy (whether it was still learning is in the training curves)."""
    acc, ch = _train_acc_chance(c)
    row: dict = {"status": "partial" if c.get("above_chance") else "at chance"}
    if acc is not None and ch is not None:
        row.update(acc=acc, chance=ch, learned_level=learned_level(ch))
    if c.get("curve"):
        row["last_train_batch_acc"] = c["curve"][-1][1]
    if "steps" in c:
        row["steps"] = c["steps"]
    return row


def _split(items: dict) -> tuple[dict, dict]:
    """{name: cell} -> ({name: cell} learned (counted), evidence lists: ``not_learned`` {name: row},
    ``at_chance`` / ``partial`` [names] (not learned, at / above chance))."""
    got = {k: c for k, c in items.items() if is_learned(c)}
    rows = {k: _not_learned_row(c) for k, c in sorted(items.items()) if k not in got}
    return got, {"not_learned": rows, "at_chance": [k for k, r in rows.items() if r["status"] == "at chance"],
                 "partial": [k for k, r in rows.items() if r["status"] == "partial"]}


def _nl_text(k: str, r: dict) -> str:
    if r.get("acc") is None:
        return f"{k} ({r['status']})"
    return f"{k} (acc {r['acc']:.2f} < learned level {r['learned_level']:.2f}, chance {r['chance']:.2f})"


def _chance_text(lists: dict) -> str:
    """One line: the cells not counted and why (accuracy vs learned level at the training length)."""
    rows = [_nl_text(k, r) for k, r in lists.get("not_learned", {}).items()]
    return ("; not learned: " + ", ".join(rows)) if rows else ""


def _precondition_parts(lists: dict) -> list[Judgement]:
    """One precondition failure per required cell that did not learn its task."""
    return [precondition_failed(f"{_nl_text(k, r)} not learned") for k, r in lists["not_learned"].items()]


def _judged(cid: str, st: str, j: Judgement, **evidence) -> Claim:
    return claim(cid, st, None if j.reason == "not_run" else j.verdict == "reproduced", judgement=j, **evidence)


def _none_counted(cid: str, st: str, lists: dict) -> Claim:
    return _judged(cid, st, precondition_failed(f"no cell learned its task ({len(lists['not_learned'])} not learned)"
                                                + _chance_text(lists)),
                   measured="no cell learned its task" + _chance_text(lists),
                   reason="no model learned the task(s) this claim is about (accuracy at the training length below "
                          "the learned level, 90% of the way from chance to perfect), so there is no profile to test",
                   **lists)


# ------------------------------------------------------------------------------------------ layer-profile claims
def late_in_recurrent(cells) -> Claim:
    st = ("Prefix tasks enter late in recurrent models: for Mamba and LSTM on Parity and S3 (each must have learned "
          "its task), the largest increase of probe accuracy from one layer to the next enters the last layer "
          "(GRU reported beside them, not counted)")
    cid = "prefix_tasks_late_in_recurrent"
    ran = {f"{a}/{t}": c for (a, t), c in cells.items() if a in LATE_ARCHS + BESIDE_ARCHS and t in PREFIX
           and "probes" in c}
    counted = {k: c for k, c in ran.items() if k.split("/")[0] in LATE_ARCHS}
    if not counted:
        return _judged(cid, st, not_run("Mamba / LSTM not run on parity/s3"),
                       reason="Mamba / LSTM were not run on parity/s3")
    per = {k: {"probe_accuracy": _acc(c), "largest_jump_enters": largest_jump_layer(_acc(c)), "late": is_late(c),
               "learned": is_learned(c)} for k, c in ran.items()}
    got, lists = _split(counted)
    beside = {k: v for k, v in per.items() if k.split("/")[0] in BESIDE_ARCHS}
    if not got:
        return _none_counted(cid, st, lists)
    early = [f"{k}: largest jump enters layer {per[k]['largest_jump_enters']} of {cells_n(got[k])}"
             for k in got if not per[k]["late"]]
    parts = [contradicted(e) for e in early] + _precondition_parts(lists)
    text = "; ".join(f"{k}: largest jump enters layer {per[k]['largest_jump_enters']} of {cells_n(got[k])} "
                     f"(probe by layer {_p(per[k]['probe_accuracy'])})" for k in got)
    text += "; beside: " + "; ".join(f"{k}: enters layer {v['largest_jump_enters']}" for k, v in beside.items())
    return _judged(cid, st, combine(parts) if parts else REPRODUCED, measured=text + _chance_text(lists),
                   n_cells=len(got), n_late=sum(per[k]["late"] for k in got),
                   not_reproduced={k: per[k] for k in got if not per[k]["late"]},
                   cells={k: per[k] for k in got}, beside=beside, **lists,
                   archs_missing=[a for a in LATE_ARCHS if not any(k.startswith(a + "/") for k in ran)])


def gradual_in_transformer(cells, max_share: float = GRADUAL_MAX_SHARE, min_gain: float = GRADUAL_MIN_GAIN) -> Claim:
    st = (f"In the Transformer, Parity and S3 probe accuracy builds up gradually over the blocks: gain from the "
          f"first to the last block >= {min_gain} and no single block adds more than {max_share:.0%} of it "
          "(both cells must have learned their task)")
    cid = "prefix_tasks_gradual_in_transformer"
    ran = {f"transformer/{t}": cells[("transformer", t)] for t in PREFIX
           if "probes" in cells.get(("transformer", t), {})}
    if not ran:
        return _judged(cid, st, not_run("transformer not run on parity/s3"), reason="transformer not run on parity/s3")
    got, lists = _split(ran)
    if not got:
        return _none_counted(cid, st, lists)
    rows = {k: gradual_row(c, max_share, min_gain) for k, c in got.items()}
    text = "; ".join(f"{k}: gain {r['gain']:.3f}, largest block step {r['max_step']:.3f} "
                     f"(blocks {_p(r['block_probe_accuracy'])})" for k, r in rows.items())
    parts = [contradicted(f"{k}: gain {r['gain']:.3f}, largest block step {r['max_step']:.3f}")
             for k, r in rows.items() if not r["gradual"]] + _precondition_parts(lists)
    return _judged(cid, st, combine(parts) if parts else REPRODUCED, measured=text + _chance_text(lists),
                   cells=rows, **lists)


def dyck_inversion(cells) -> Claim:
    """Both halves of the study's inversion on Dyck: early in the Transformer, gradual in the recurrent models."""
    st = ("The inversion on Dyck: Dyck depth is best read out early in the Transformer (best block <= half of its "
          "blocks) and builds up gradually in the recurrent models (Mamba and LSTM: gain >= "
          f"{GRADUAL_MIN_GAIN} from the first to the last block, no block adding more than {GRADUAL_MAX_SHARE:.0%} of "
          "it; GRU beside, not counted); every one of these cells must have learned Dyck")
    cid = "dyck_early_in_transformer_gradual_in_recurrent"
    need = ["transformer"] + LATE_ARCHS
    ran = {f"{a}/dyck": cells[(a, "dyck")] for a in need if "probes" in cells.get((a, "dyck"), {})}
    missing = [a for a in need if f"{a}/dyck" not in ran]
    if missing:
        return _judged(cid, st, not_run(f"{', '.join(missing)} not run on dyck"),
                       reason=f"{', '.join(missing)} not run on dyck")
    got, lists = _split(ran)
    if not got:
        return _none_counted(cid, st, lists)
    rows, parts = {}, []
    for k, c in got.items():
        if k.startswith("transformer/"):
            b = best_block(c)
            rows[k] = {"half": "early", "best_block": b, "n_layers": cells_n(c), "ok": b <= cells_n(c) // 2,
                       "block_probe_accuracy": _blocks(c).tolist()}
            if not rows[k]["ok"]:
                parts.append(contradicted(f"{k}: best block {b} of {cells_n(c)}"))
        else:
            r = gradual_row(c)
            rows[k] = dict(r, half="gradual", ok=r["gradual"])
            if not r["gradual"]:
                parts.append(contradicted(f"{k}: gain {r['gain']:.3f}, largest block step {r['max_step']:.3f}"))
    beside = {f"{a}/dyck": dict(gradual_row(cells[(a, "dyck")]), learned=is_learned(cells[(a, "dyck")]))
              for a in BESIDE_ARCHS if "probes" in cells.get((a, "dyck"), {})}
    text = "; ".join(f"{k}: best block {r['best_block']} of {r['n_layers']}" if r["half"] == "early" else
                     f"{k}: gain {r['gain']:.3f}, largest block step {r['max_step']:.3f}"
                     + f" (blocks {_p(r['block_probe_accuracy'])})" for k, r in rows.items())
    parts += _precondition_parts(lists)
    return _judged(cid, st, combine(parts) if parts else REPRODUCED, measured=text + _chance_text(lists),
                   cells=rows, beside=beside, **lists)


def s3_with_parity(cells) -> Claim:
    st = ("S3 groups with Parity, not Dyck: for most architectures (every one that learned S3, Parity and Dyck) the "
          "S3 layer profile has the study's descriptors (early / late / gradual, as the other claims define them) of "
          "the Parity profile, and not those of the Dyck profile")
    cid = "s3_groups_with_parity"
    per, lists, ran = {}, {"not_learned": {}, "at_chance": [], "partial": []}, False
    for a in sorted({a for a, _ in cells}):
        cs = {t: cells.get((a, t)) for t in ("s3", "parity", "dyck")}
        if any(c is None or "probes" not in c for c in cs.values()):
            continue
        ran = True
        got, ls = _split({f"{a}/{t}": c for t, c in cs.items()})
        for key in lists:
            lists[key] = {**lists[key], **ls[key]} if isinstance(lists[key], dict) else lists[key] + ls[key]
        if len(got) < 3:
            continue
        kinds = {t: profile_kinds(cs[t]) for t in ("s3", "parity", "dyck")}
        per[a] = {"kinds": kinds, "grouped": kinds["s3"] == kinds["parity"] != kinds["dyck"]}
    if not ran:
        return _judged(cid, st, not_run("no architecture ran s3, parity and dyck"),
                       reason="no architecture ran s3, parity and dyck")
    if not per:
        return _none_counted(cid, st, lists)
    closer = [a for a, d in per.items() if d["grouped"]]
    text = "; ".join(f"{a}: s3 {'/'.join(d['kinds']['s3']) or 'none'}, parity {'/'.join(d['kinds']['parity']) or 'none'}"
                     f", dyck {'/'.join(d['kinds']['dyck']) or 'none'}" for a, d in per.items())
    held = len(closer) > len(per) / 2
    return _judged(cid, st, REPRODUCED if held else contradicted(
                       f"S3 groups with Parity (not Dyck) in {len(closer)} of {len(per)} architectures that learned "
                       "all three"),
                   measured=text + _chance_text(lists), archs_grouped=closer, n_archs=len(per), profiles=per, **lists)


# ------------------------------------------------------------------------------------------ ablation claims
def _mean_drop(by_len: dict, lens) -> float:
    return float(np.mean([by_len[L]["drop"] for L in lens]))


def _beats(ps: float, rs: float, margin: float) -> str:
    """'wins' (probe drop > random + margin), 'short' (above the random drop, not by the margin), 'loses'."""
    return "wins" if ps > rs + margin else "short" if ps > rs else "loses"


def _most(outcomes: dict, what: str) -> Judgement:
    """Verdict of "in most cells" over {cell: 'wins' / 'short' / 'loses'}: most win -> reproduced; most at least
    point the study's way (win or short of the margin) -> inconclusive / scale; else contradicted."""
    n = len(outcomes)
    wins = [k for k, o in outcomes.items() if o == "wins"]
    short = [k for k, o in outcomes.items() if o == "short"]
    if len(wins) > n / 2:
        return REPRODUCED
    if len(wins) + len(short) > n / 2:
        return short_of_scale(f"{what}: beats random by the margin in {len(wins)} of {n} cells, above random but "
                              f"short of the margin in {len(short)} ({', '.join(short)})")
    return contradicted(f"{what}: probe subspace beats random in {len(wins)} of {n} cells")


def direction_ablation(cells, margin: float = ABLATION_MARGIN, ood_min_len: int = OOD_MIN_LEN) -> Claim:
    st = (f"Projecting out the probe subspace (all class directions of the probe at the best block) drops accuracy "
          f"more than projecting out a random subspace of equal rank (by > {margin}) in most cells that learned "
          f"their task, both at the training length and at the unseen lengths >= {ood_min_len} (mean; cells at "
          "chance there are not counted at those lengths)")
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
                                                      "outcome": _beats(ps, rs, margin)}}
        row["train"]["wins"] = row["train"]["outcome"] == "wins"
        if ood_ok:
            ps, rs = _mean_drop(ab["probe_subspace"], ood_ok), _mean_drop(ab["random_subspace"], ood_ok)
            row["unseen"] = {"lengths": ood_ok, "probe_subspace": ps, "random_subspace": rs,
                             "outcome": _beats(ps, rs, margin)}
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
    text = "drop probe subspace / random subspace (train length; lengths >= %d): " % ood_min_len + "; ".join(
        f"{k} {r['train']['probe_subspace']:.2f}/{r['train']['random_subspace']:.2f}"
        + (f", {r['unseen']['probe_subspace']:.2f}/{r['unseen']['random_subspace']:.2f}" if "unseen" in r else "")
        for k, r in per.items())
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


def split_row(res: dict, margin: float = CAUSAL_MARGIN) -> tuple[dict, Judgement]:
    """One model's readable block (best probe block), causal block (:func:`causal_block` of its per-layer
    probe-subspace ablation against the random subspace) and the verdict of "they differ": differ -> reproduced;
    same block -> contradicted; no causal block but a block whose drop exceeds its control (short of ``margin``) ->
    inconclusive / scale with the value and its control; no block above its control -> contradicted (absent)."""
    drops, ctrl = res["layer_ablation_drop"][1:], res["layer_random_drop"][1:]
    causal = causal_block(drops, ctrl, margin)
    excess = np.asarray(drops, dtype=float) - np.asarray(ctrl, dtype=float)
    j_best = int(np.argmax(excess))
    row = {"readable_block": best_block(res), "causal_block": causal, "block_drops": list(drops),
           "block_random_drops": list(ctrl), "largest_excess_block": j_best + 1, "largest_excess": float(excess[j_best])}
    if causal is not None:
        same = row["readable_block"] == causal
        return row, contradicted(f"readable and causal block both {causal}") if same else REPRODUCED
    what = (f"block {j_best + 1}: drop {drops[j_best]:.3f} vs random subspace {ctrl[j_best]:.3f} "
            f"(needs + {margin})")
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
          f"(a drop counts only when >= {margin} above projecting out a random subspace of equal rank there); the "
          "toy cells are reported beside, not counted")
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


def conv1d(conv_runs, min_seeds: int = MIN_CONV_SEEDS, margin: float = EQUIV_MARGIN) -> Claim:
    st = (f"Removing Mamba's Conv1D costs accuracy on Parity and S3 but not on Dyck: over >= {min_seeds} seeds "
          "(Mamba with Conv1D must have learned the task in every seed, else that task is a precondition failure), "
          "the 95% t-interval across seeds of the drop "
          "in mean accuracy over the evaluation lengths lies above 0 for Parity and S3, and for Dyck the 90% interval "
          f"lies inside the equivalence margin [-{margin:g}, +{margin:g}] (two one-sided tests)")
    cid = "conv1d_matters_for_prefix_not_dyck"
    per, seeds, ivs = {}, {}, {}
    for t in PREFIX + ["dyck"]:
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
    if len(per) < 3:
        return _judged(cid, st, not_run(f"fewer than {min_seeds} seeds with and without Conv1D"),
                       reason=f"Mamba with and without Conv1D needs >= {min_seeds} seeds on parity, s3 and dyck",
                       seeds=seeds)
    parts = []
    for t in PREFIX + ["dyck"]:
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
            parts.append(interval_verdict(ivs[t][0], +1, 0.0, what=f"{t} drop"))
    text = "; ".join(f"{t}: drop {ivs[t][0].fmt()}, 90% [{v['lo90']:.3f}, {v['hi90']:.3f}] (accuracy with "
                     f"{np.mean(v['acc_with']):.3f}, without {np.mean(v['acc_without']):.3f}; with Conv1D learned in "
                     f"{sum(v['with_learned'])} of {len(v['with_learned'])} seeds)" for t, v in per.items())
    return _judged(cid, st, combine(parts), measured=text, equivalence_margin=margin,
                   **{f"{t}_drop": v for t, v in per.items()},
                   note="compares task accuracy itself; acc_with / acc_without are the mean accuracies over lengths "
                        f"per seed; the equivalence margin {margin:g} is fixed a priori (the smallest accuracy drop "
                        "this study counts as an effect, its causal margin)")


def all_claims(cells, conv_runs=None, pretrained=None) -> list[Claim]:
    return [late_in_recurrent(cells), gradual_in_transformer(cells), dyck_inversion(cells), s3_with_parity(cells),
            direction_ablation(cells), conv1d(conv_runs or {}), readability_causality(pretrained or [], cells)]
