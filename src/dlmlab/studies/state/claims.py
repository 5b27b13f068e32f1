"""The state study's claims, computed from the per-cell measurements (never hand-set).

``cells`` maps ``(arch, task) -> cell dict`` (see :func:`dlmlab.studies.state.cells.run_cell`);
``conv_runs`` maps ``(variant, task, seed) -> run dict`` (Mamba with and without Conv1D, several
seeds; each with ``acc_per_seq``).  A claim whose cells were not run (architecture unavailable, task
not in the preset) has ``holds = None`` and says why.

Which cells count: a profile (probe / ablation / patching) is used for every cell *above chance*
(``cell["above_chance"]``: per-token accuracy at the training length >= the majority-label rate +
``chance_margin``); cells that are above chance but below ``learned_acc`` are *partial* and listed as
such in the evidence; cells at chance are listed as ``at_chance`` and not counted.  A claim with no
counted cell left has ``holds = False`` with a ``reason``.

Verdicts (see :mod:`dlmlab.report.claims`): cells not run -> inconclusive / not_run; no cell above chance
-> inconclusive / precondition (the models never learned the task, so there is no profile to test); cells
above chance whose profile is not the one claimed -> contradicted; the Conv1D claim's intervals decide it.

Profiles are read over the blocks (layer 1 ... n_layers, the residual stream after each block); the
embedding (layer 0) enters only as the start of the first probe-accuracy jump.
"""

from __future__ import annotations

import numpy as np

from dlmlab.report import Claim, claim
from dlmlab.report.claims import (REPRODUCED, Judgement, combine, contradicted, not_run, precondition_failed,
                                  verdict_from_interval)
from dlmlab.report.intervals import hierarchical_ci

LATE_ARCHS = ["mamba", "lstm"]  # the study's claim is about these two
BESIDE_ARCHS = ["gru"]  # reported beside them, not counted
PREFIX = ["parity", "s3"]
TOL = 0.005  # best layer = earliest layer within TOL of the best probe accuracy
CAUSAL_MARGIN = 0.05  # a layer's ablation drop counts as causal when >= random control + this
ABLATION_MARGIN = 0.02  # probe-subspace drop must beat the random subspace's by more than this
OOD_MIN_LEN = 80  # "unseen lengths": evaluation lengths >= this
MIN_CONV_SEEDS = 3


def _acc(cell) -> list[float]:
    return [pr["accuracy"] for pr in cell["probes"]]


def _blocks(cell) -> np.ndarray:
    """Probe accuracy after each block (layer 1 ... n_layers)."""
    return np.asarray(_acc(cell)[1:], dtype=float)


def best_block(cell) -> int:
    """Layer index (1 ... n_layers) of the earliest block within TOL of the best block probe accuracy."""
    b = _blocks(cell)
    return int(np.flatnonzero(b >= b.max() - TOL)[0]) + 1


def _counted(cell) -> bool:
    return bool(cell.get("above_chance", False))


def _partial(cell) -> bool:
    return _counted(cell) and not bool(cell.get("learned", False))


def _at_chance_row(c) -> dict:
    """Why a cell is not counted: its accuracy and chance at the training length, and its last training-batch
    accuracy (whether it was still learning is in the report's training curves)."""
    L = c.get("train_len")
    row = {}
    if L is not None and L in c.get("acc_by_len", {}):
        row = {"acc": c["acc_by_len"][L], "chance": c.get("chance", {}).get(L)}
    if c.get("curve"):
        row["last_train_batch_acc"] = c["curve"][-1][1]
    return row


def _split(items: dict) -> tuple[dict, dict]:
    """{name: cell} -> ({name: cell} counted (above chance), evidence: at_chance {name: accuracies}, partial [names])."""
    got = {k: c for k, c in items.items() if _counted(c)}
    return got, {"at_chance": {k: _at_chance_row(c) for k, c in sorted(items.items()) if not _counted(c)},
                 "partial": sorted(k for k, c in got.items() if _partial(c))}


def _p(xs) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


def _chance_text(lists: dict) -> str:
    """One line: the cells not counted and why (accuracy vs chance at the training length)."""
    rows = [f"{k} (acc {r['acc']:.2f}, chance {r['chance']:.2f})" if r.get("acc") is not None else k
            for k, r in lists.get("at_chance", {}).items()]
    return ("; at chance: " + ", ".join(rows)) if rows else ""


def _none_counted(cid: str, st: str, lists: dict) -> Claim:
    return claim(cid, st, False, judgement=precondition_failed(
                     f"no cell above chance ({len(lists['at_chance'])} at chance)"),
                 measured="no cell above chance" + _chance_text(lists), reason="no model reached above-chance accuracy on the task(s) this claim is "
                 "about (accuracy at the training length below the majority-label rate + chance_margin), so "
                 "there is no profile to test", **lists)


def _norm(profile) -> np.ndarray:
    a = np.asarray(profile, dtype=float)
    span = a.max() - a.min()
    return (a - a.min()) / span if span > 1e-9 else np.zeros_like(a)


def largest_jump_layer(acc) -> int:
    """Layer (1 ... n) that the largest probe-accuracy increase ``acc[i] - acc[i-1]`` enters (earliest on ties)."""
    return int(np.argmax(np.diff(np.asarray(acc, dtype=float)))) + 1


def cells_n(c) -> int:
    return int(c["n_layers"])


def late_in_recurrent(cells) -> Claim:
    st = ("Prefix tasks enter late in recurrent models: for Mamba and LSTM on Parity and S3 (every cell above "
          "chance), the largest increase of probe accuracy from one layer to the next enters the last layer "
          "(GRU reported beside them, not counted)")
    cid = "prefix_tasks_late_in_recurrent"
    ran = {f"{a}/{t}": c for (a, t), c in cells.items() if a in LATE_ARCHS + BESIDE_ARCHS and t in PREFIX
           and "probes" in c}
    counted = {k: c for k, c in ran.items() if k.split("/")[0] in LATE_ARCHS}
    if not counted:
        return claim(cid, st, None, judgement=not_run("Mamba / LSTM not run on parity/s3"),
                     reason="Mamba / LSTM were not run on parity/s3")
    per = {}
    for k, c in ran.items():
        acc = _acc(c)
        per[k] = {"probe_accuracy": acc, "largest_jump_enters": largest_jump_layer(acc),
                  "late": largest_jump_layer(acc) == c["n_layers"], "partial": _partial(c),
                  "above_chance": _counted(c)}
    got, lists = _split(counted)
    beside = {k: v for k, v in per.items() if k.split("/")[0] in BESIDE_ARCHS}
    if not got:
        return claim(cid, st, False, judgement=precondition_failed("no Mamba / LSTM cell on parity/s3 is above chance"),
                     reason="no Mamba / LSTM cell on parity/s3 is above chance", **lists,
                     cells={k: per[k] for k in counted}, beside=beside)
    late = {k: per[k]["late"] for k in got}
    text = "; ".join(f"{k}{' (partial)' if per[k]['partial'] else ''}: largest jump enters layer "
                     f"{per[k]['largest_jump_enters']} of {cells_n(got[k])} (probe by layer {_p(per[k]['probe_accuracy'])})"
                     for k in got)
    text += "; beside: " + "; ".join(f"{k}: enters layer {v['largest_jump_enters']}" for k, v in beside.items())
    early = [f"{k}: largest jump enters layer {per[k]['largest_jump_enters']} of {cells_n(got[k])}"
             for k in got if not late[k]]
    return claim(cid, st, all(late.values()), judgement=_all_or_contradicted(early),
                 measured=text + _chance_text(lists),
                 n_cells=len(late), n_late=sum(late.values()),
                 not_reproduced={k: per[k] for k in got if not late[k]},
                 cells={k: per[k] for k in got}, beside=beside, **lists,
                 archs_missing=[a for a in LATE_ARCHS if not any(k.startswith(a + "/") for k in ran)])


def gradual_in_transformer(cells, max_share: float = 0.6, min_gain: float = 0.1) -> Claim:
    st = (f"In the Transformer, Parity and S3 probe accuracy builds up gradually over the blocks: gain from the "
          f"first to the last block >= {min_gain} and no single block adds more than {max_share:.0%} of it")
    cid = "prefix_tasks_gradual_in_transformer"
    ran = {f"transformer/{t}": cells[("transformer", t)] for t in PREFIX
           if "probes" in cells.get(("transformer", t), {})}
    if not ran:
        return claim(cid, st, None, judgement=not_run("transformer not run on parity/s3"),
                     reason="transformer not run on parity/s3")
    got, lists = _split(ran)
    if not got:
        return _none_counted(cid, st, lists)
    rows = {}
    for k, c in got.items():
        b = _blocks(c)
        gain = float(b[-1] - b[0])
        step = float(np.diff(b).max()) if len(b) > 1 else 0.0
        rows[k] = {"block_probe_accuracy": b.tolist(), "gain": gain, "max_step": step,
                   "gradual": gain >= min_gain and step <= max_share * gain}
    text = "; ".join(f"{k}{' (partial)' if _partial(got[k]) else ''}: gain {r['gain']:.3f}, largest block step "
                     f"{r['max_step']:.3f} (blocks {_p(r['block_probe_accuracy'])})" for k, r in rows.items())
    abrupt = [f"{k}: gain {r['gain']:.3f}, largest block step {r['max_step']:.3f}" for k, r in rows.items()
              if not r["gradual"]]
    return claim(cid, st, all(r["gradual"] for r in rows.values()), judgement=_all_or_contradicted(abrupt),
                 measured=text + _chance_text(lists),
                 cells=rows, **lists)


def dyck_early(cells) -> Claim:
    st = "Dyck depth is best read out early in the Transformer: best block <= half of its blocks"
    cid = "dyck_early_in_transformer"
    c = cells.get(("transformer", "dyck"))
    if c is None or "probes" not in c:
        return claim(cid, st, None, judgement=not_run("transformer not run on dyck"),
                     reason="transformer not run on dyck")
    got, lists = _split({"transformer/dyck": c})
    if not got:
        return _none_counted(cid, st, lists)
    b = best_block(c)
    late = [] if b <= c["n_layers"] // 2 else [f"best block {b} of {c['n_layers']}"]
    return claim(cid, st, b <= c["n_layers"] // 2, judgement=_all_or_contradicted(late), measured=f"best block {b} of {c['n_layers']} (blocks "
                 f"{_p(_blocks(c))})", best_block=b, n_layers=c["n_layers"],
                 block_probe_accuracy=_blocks(c).tolist(), **lists)


def s3_with_parity(cells) -> Claim:
    st = ("S3 groups with Parity, not Dyck: for most architectures (every one above chance on all three tasks) the "
          "S3 profile of probe accuracy over the blocks (min-max normalised) is closer (mean |difference|) to "
          "Parity's than to Dyck's")
    cid = "s3_groups_with_parity"
    per, lists, ran = {}, {"at_chance": {}, "partial": []}, False
    for a in sorted({a for a, _ in cells}):
        cs = {t: cells.get((a, t)) for t in ("s3", "parity", "dyck")}
        if any(c is None or "probes" not in c for c in cs.values()):
            continue
        ran = True
        got, ls = _split({f"{a}/{t}": c for t, c in cs.items()})
        lists["at_chance"].update(ls["at_chance"])
        lists["partial"] += ls["partial"]
        if len(got) < 3:
            continue
        s3, par, dy = (_norm(_blocks(cs[t])) for t in ("s3", "parity", "dyck"))
        per[a] = {"d_parity": float(np.abs(s3 - par).mean()), "d_dyck": float(np.abs(s3 - dy).mean())}
    if not ran:
        return claim(cid, st, None, judgement=not_run("no architecture ran s3, parity and dyck"),
                     reason="no architecture ran s3, parity and dyck")
    if not per:
        return _none_counted(cid, st, lists)
    closer = [a for a, d in per.items() if d["d_parity"] < d["d_dyck"]]
    text = "; ".join(f"{a}: to parity {d['d_parity']:.2f}, to dyck {d['d_dyck']:.2f}" for a, d in per.items())
    held = len(closer) > len(per) / 2
    return claim(cid, st, held, judgement=REPRODUCED if held else contradicted(
                     f"{len(closer)} of {len(per)} architectures closer to parity"),
                 measured=text + _chance_text(lists),
                 archs_closer_to_parity=closer, n_archs=len(per),
                 distances=per, **lists)


def _mean_drop(by_len: dict, lens) -> float:
    return float(np.mean([by_len[L]["drop"] for L in lens]))


def direction_ablation(cells, margin: float = ABLATION_MARGIN, ood_min_len: int = OOD_MIN_LEN) -> Claim:
    st = (f"Projecting out the probe subspace (all class directions of the probe at the best block) drops accuracy "
          f"more than projecting out a random subspace of equal rank (by > {margin}) in most cells above chance, "
          f"both at the training length and at the unseen lengths >= {ood_min_len} (mean; cells at chance there "
          "are not counted at those lengths)")
    cid = "probe_direction_ablation_drops_accuracy"
    ran = {f"{a}/{t}": c for (a, t), c in cells.items() if "ablation" in c}
    if not ran:
        return claim(cid, st, None, judgement=not_run("no ablation was run"), reason="no ablation was run")
    got, lists = _split(ran)
    if not got:
        return _none_counted(cid, st, lists)
    per, at_chance_ood = {}, []
    for k, c in got.items():
        ab, L0 = c["ablation"], c["train_len"]
        ood = sorted(L for L in ab["probe_subspace"] if int(L) >= ood_min_len)
        ood_ok = [L for L in ood if c.get("above_chance_by_len", {}).get(L, False)]
        row = {"rank": c.get("ablation_k"), "train": {"probe_subspace": ab["probe_subspace"][L0]["drop"],
                                                      "random_subspace": ab["random_subspace"][L0]["drop"]}}
        row["train"]["wins"] = row["train"]["probe_subspace"] > row["train"]["random_subspace"] + margin
        if ood_ok:
            ps, rs = _mean_drop(ab["probe_subspace"], ood_ok), _mean_drop(ab["random_subspace"], ood_ok)
            row["unseen"] = {"lengths": ood_ok, "probe_subspace": ps, "random_subspace": rs, "wins": ps > rs + margin}
        else:
            at_chance_ood.append(k)
        per[k] = row
    n_train = sum(r["train"]["wins"] for r in per.values())
    ood_rows = [r for r in per.values() if "unseen" in r]
    n_ood = sum(r["unseen"]["wins"] for r in ood_rows)
    holds = n_train > len(per) / 2 and bool(ood_rows) and n_ood > len(ood_rows) / 2
    if holds:
        verdict = REPRODUCED
    elif not n_train > len(per) / 2:
        verdict = contradicted(f"probe subspace beats random in {n_train} of {len(per)} cells at the training length")
    elif not ood_rows:
        verdict = precondition_failed(f"no cell above chance at lengths >= {ood_min_len}")
    else:
        verdict = contradicted(f"probe subspace beats random in {n_ood} of {len(ood_rows)} cells at lengths "
                               f">= {ood_min_len}")
    text = "drop probe subspace / random subspace (train length; lengths >= %d): " % ood_min_len + "; ".join(
        f"{k} {r['train']['probe_subspace']:.2f}/{r['train']['random_subspace']:.2f}"
        + (f", {r['unseen']['probe_subspace']:.2f}/{r['unseen']['random_subspace']:.2f}" if "unseen" in r else "")
        for k, r in per.items())
    return claim(cid, st, holds, judgement=verdict, measured=text + _chance_text(lists), n_cells=len(per),
                 n_wins_train_len=n_train, n_cells_unseen=len(ood_rows),
                 n_wins_unseen=n_ood, at_chance_at_unseen_lengths=sorted(at_chance_ood), cells=per, **lists)


def causal_block(drops, control, margin: float = CAUSAL_MARGIN) -> int | None:
    """Layer (1 ... n) of the largest block ablation drop among those >= control + margin (earliest within
    TOL); ``drops`` / ``control`` [n_blocks]. None when no block's drop clears its control."""
    d, c = np.asarray(drops, dtype=float), np.asarray(control, dtype=float)
    ok = d >= c + margin
    if not ok.any():
        return None
    best = d[ok].max()
    return int(np.flatnonzero(ok & (d >= best - TOL))[0]) + 1


def readability_causality(cells, margin: float = CAUSAL_MARGIN) -> Claim:
    st = ("Readability and causal use split: in most cells above chance that have a causal block, the block where "
          "the state is best linearly readable differs from the block whose probe-subspace ablation drops accuracy "
          f"most (a drop counts only when >= {margin} above projecting out a random subspace of equal rank there)")
    cid = "readability_vs_causality_split"
    ran = {f"{a}/{t}": c for (a, t), c in cells.items() if "layer_ablation_drop" in c and "layer_random_drop" in c}
    if not ran:
        return claim(cid, st, None, judgement=not_run("no cell was analysed"), reason="no cell was analysed")
    got, lists = _split(ran)
    if not got:
        return _none_counted(cid, st, lists)
    per, no_causal = {}, []
    for k, c in got.items():
        drops, ctrl = c["layer_ablation_drop"][1:], c["layer_random_drop"][1:]
        causal = causal_block(drops, ctrl, margin)
        row = {"readable_block": best_block(c), "causal_block": causal, "block_drops": drops,
               "block_random_drops": ctrl}
        if causal is None:
            no_causal.append(k)
        per[k] = row
    with_causal = {k: r for k, r in per.items() if r["causal_block"] is not None}
    split = sorted(k for k, r in with_causal.items() if r["readable_block"] != r["causal_block"])
    if not with_causal:
        return claim(cid, st, False, judgement=contradicted(f"no cell has a causal block (no block's ablation "
                     f"drop clears its random control by {margin}) although the cells learned their task"),
                     reason=f"no block's ablation drop clears its random control by {margin}",
                     no_causal_block=sorted(no_causal), cells=per, **lists)
    text = "; ".join(f"{k}: readable block {r['readable_block']}, causal block {r['causal_block']}"
                     for k, r in with_causal.items()) + "; no causal block: " + ", ".join(sorted(no_causal))
    held = len(split) > len(with_causal) / 2
    return claim(cid, st, held, judgement=REPRODUCED if held else contradicted(
                     f"readable and causal block differ in {len(split)} of {len(with_causal)} cells"),
                 measured=text + _chance_text(lists),
                 n_cells=len(with_causal), n_split=len(split),
                 split=split, no_causal_block=sorted(no_causal), cells=per, **lists)


def conv_drop_grid(with_runs: list[dict], without_runs: list[dict]) -> np.ndarray:
    """Per seed and evaluation item (sequence x length): accuracy with Conv1D - without -> [S, N]."""
    rows = []
    for a, b in zip(with_runs, without_runs):
        lens = sorted(a["acc_per_seq"], key=int)
        rows.append(np.concatenate([np.asarray(a["acc_per_seq"][L]) - np.asarray(b["acc_per_seq"][L]) for L in lens]))
    return np.stack(rows)


def conv1d(conv_runs, min_seeds: int = MIN_CONV_SEEDS) -> Claim:
    st = (f"Removing Mamba's Conv1D costs accuracy on Parity and S3 but not on Dyck: over >= {min_seeds} seeds, the "
          "95% interval (bootstrap over seeds, then evaluation sequences) of the drop in mean accuracy over the "
          "evaluation lengths lies above 0 for Parity and S3 and contains 0 for Dyck")
    cid = "conv1d_matters_for_prefix_not_dyck"
    per, seeds = {}, {}
    for t in PREFIX + ["dyck"]:
        s_with = sorted(s for v, tt, s in conv_runs if v == "mamba" and tt == t)
        s_both = [s for s in s_with if ("mamba-noconv", t, s) in conv_runs]
        seeds[t] = s_both
        if len(s_both) < min_seeds:
            continue
        grid = conv_drop_grid([conv_runs[("mamba", t, s)] for s in s_both],
                              [conv_runs[("mamba-noconv", t, s)] for s in s_both])
        ci = hierarchical_ci(grid)
        per[t] = dict(ci.as_dict(), per_seed=grid.mean(1).tolist(),
                      acc_with=[float(np.mean(list(conv_runs[("mamba", t, s)]["acc_by_len"].values()))) for s in s_both],
                      acc_without=[float(np.mean(list(conv_runs[("mamba-noconv", t, s)]["acc_by_len"].values())))
                                   for s in s_both])
    if len(per) < 3:
        return claim(cid, st, None, judgement=not_run(f"fewer than {min_seeds} seeds with and without Conv1D"),
                     reason=f"Mamba with and without Conv1D needs >= {min_seeds} seeds on parity, s3 "
                     "and dyck", seeds=seeds)
    holds = per["parity"]["lo"] > 0 and per["s3"]["lo"] > 0 and per["dyck"]["lo"] <= 0 <= per["dyck"]["hi"]
    text = "; ".join(f"{t}: drop {v['mean']:.3f} [{v['lo']:.3f}, {v['hi']:.3f}] (accuracy with {np.mean(v['acc_with']):.3f}"
                     f", without {np.mean(v['acc_without']):.3f})" for t, v in per.items())
    parts = [_conv_prefix_verdict(t, per[t], [conv_runs[("mamba", t, s)] for s in seeds[t]]) for t in PREFIX]
    dy = per["dyck"]
    parts.append(REPRODUCED if dy["lo"] <= 0 <= dy["hi"] else
                 contradicted(f"dyck drop [{dy['lo']:.3g}, {dy['hi']:.3g}] excludes 0"))
    return claim(cid, st, holds, judgement=combine(parts), measured=text, **{f"{t}_drop": v for t, v in per.items()},
                 note="compares task accuracy itself (any accuracy, also at chance); acc_with / acc_without are "
                      "the mean accuracies over lengths per seed")


def _all_or_contradicted(failures: list[str]) -> Judgement:
    """Reproduced when no counted cell fails, else contradicted (the cells are above chance: the profile the
    claim names is absent while its precondition holds)."""
    return contradicted("; ".join(failures)) if failures else REPRODUCED


def _conv_prefix_verdict(task: str, drop: dict, with_runs: list[dict]) -> Judgement:
    """The drop's interval decides (above 0: reproduced), unless Mamba with Conv1D is at chance on ``task`` in
    every seed (nothing to lose): then inconclusive / precondition."""
    j = verdict_from_interval(drop["lo"], drop["hi"], +1, what=f"{task} drop")
    if j.verdict != "reproduced" and not any(r.get("above_chance", True) for r in with_runs):
        return precondition_failed(f"Mamba with Conv1D at chance on {task} in every seed")
    return j


def all_claims(cells, conv_runs=None) -> list[Claim]:
    return [late_in_recurrent(cells), gradual_in_transformer(cells), dyck_early(cells), s3_with_parity(cells),
            direction_ablation(cells), conv1d(conv_runs or {}), readability_causality(cells)]
