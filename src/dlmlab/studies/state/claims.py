"""The state study's claims, computed from the per-cell measurements (never hand-set).

``cells`` maps ``(arch, task) -> cell dict`` (see :func:`dlmlab.studies.state.cells.run_cell`).
A claim whose cells were not run (architecture unavailable, task not in the preset) has
``holds = None`` and says why.  Claims about probe / ablation / patching profiles count only
*learned* cells (``cell["learned"]``: accuracy at the training length >= the preset's
``learned_acc``); the cells they skip are listed in the evidence as ``not_learned``, and a
claim with no learned cell left has ``holds = False`` with a ``reason``.
"""

from __future__ import annotations

import numpy as np

from dlmlab.report import Claim, claim

RECURRENT = ["mamba", "lstm", "gru"]
PREFIX = ["parity", "s3"]
TOL = 0.005  # best layer = earliest layer within TOL of the best probe accuracy


def _acc(cell) -> list[float]:
    return [pr["accuracy"] for pr in cell["probes"]]


def _mean_acc(cell) -> float:
    return float(np.mean(list(cell["acc_by_len"].values())))


def _learned(cell) -> bool:
    return bool(cell.get("learned", False))


def _split(items: dict) -> tuple[dict, list[str]]:
    """{name: cell} -> ({name: cell} of learned cells, sorted names of the others)."""
    return {k: c for k, c in items.items() if _learned(c)}, sorted(k for k, c in items.items() if not _learned(c))


def _none_learned(cid: str, st: str, not_learned: list[str]) -> Claim:
    return claim(cid, st, False, reason="no model learned the task(s) this claim is about (accuracy at the "
                 "training length below the preset's learned_acc), so its probe profile says nothing",
                 not_learned=not_learned)


def _norm(profile) -> np.ndarray:
    a = np.asarray(profile, dtype=float)
    span = a.max() - a.min()
    return (a - a.min()) / span if span > 1e-9 else np.zeros_like(a)


def late_in_recurrent(cells) -> Claim:
    ran = {f"{a}/{t}": c for (a, t), c in cells.items() if a in RECURRENT and t in PREFIX and "probes" in c}
    st = ("Prefix tasks (Parity, S3) are best read out at the last layer of recurrent models (Mamba, LSTM, GRU) "
          f"that learned them: best probe layer (earliest within {TOL} of the max; 0 = embedding) == last layer")
    cid = "prefix_tasks_late_in_recurrent"
    if not ran:
        return claim(cid, st, None, reason="no recurrent model was run on parity/s3")
    got, not_learned = _split(ran)
    if not got:
        return _none_learned(cid, st, not_learned)
    late = {k: c["best_layer"] == c["n_layers"] for k, c in got.items()}
    return claim(cid, st, all(late.values()), n_cells=len(late), n_late=sum(late.values()),
                 best_layers={k: c["best_layer"] for k, c in got.items()}, not_learned=not_learned,
                 archs_missing=[a for a in RECURRENT if not any(k.startswith(a + "/") for k in ran)])


def gradual_in_transformer(cells, max_share: float = 0.6, min_gain: float = 0.1) -> Claim:
    st = (f"In the Transformer (where it learned the task), Parity and S3 probe accuracy builds up gradually over layers: total gain "
          f"(last layer - embedding) >= {min_gain} and no single layer adds more than {max_share:.0%} of it")
    rows, not_learned, cid = {}, [], "prefix_tasks_gradual_in_transformer"
    ran = [t for t in PREFIX if "probes" in cells.get(("transformer", t), {})]
    for t in ran:
        c = cells[("transformer", t)]
        if not _learned(c):
            not_learned.append(f"transformer/{t}")
            continue
        a = np.asarray(_acc(c))
        gain = float(a[-1] - a[0])
        step = float(np.diff(a).max()) if len(a) > 1 else 0.0
        rows[t] = {"gain": gain, "max_step": step, "gradual": gain >= min_gain and step <= max_share * gain}
    if not ran:
        return claim(cid, st, None, reason="transformer not run on parity/s3")
    if not rows:
        return _none_learned(cid, st, not_learned)
    return claim(cid, st, all(r["gradual"] for r in rows.values()), not_learned=not_learned,
                 **{f"{t}_gain": r["gain"] for t, r in rows.items()},
                 **{f"{t}_max_step": r["max_step"] for t, r in rows.items()})


def dyck_early(cells) -> Claim:
    c = cells.get(("transformer", "dyck"))
    st = ("Dyck depth is best read out early in the Transformer (which learned Dyck): best probe layer <= half "
          "of its blocks")
    if c is None or "probes" not in c:
        return claim("dyck_early_in_transformer", st, None, reason="transformer not run on dyck")
    if not _learned(c):
        return _none_learned("dyck_early_in_transformer", st, ["transformer/dyck"])
    return claim("dyck_early_in_transformer", st, c["best_layer"] <= c["n_layers"] // 2,
                 best_layer=c["best_layer"], n_layers=c["n_layers"], probe_accuracy=_acc(c))


def s3_with_parity(cells) -> Claim:
    st = ("S3 groups with Parity, not Dyck: for most architectures that learned all three tasks the S3 layer profile of probe accuracy "
          "(min-max normalised) is closer (mean |difference|) to Parity's than to Dyck's")
    per, not_learned, ran = {}, [], False
    for a in sorted({a for a, _ in cells}):
        cs = [cells.get((a, t)) for t in ("s3", "parity", "dyck")]
        if any(c is None or "probes" not in c for c in cs):
            continue
        ran = True
        if not all(_learned(c) for c in cs):
            not_learned += [f"{a}/{t}" for t, c in zip(("s3", "parity", "dyck"), cs) if not _learned(c)]
            continue
        s3, par, dy = (_norm(_acc(c)) for c in cs)
        per[a] = {"d_parity": float(np.abs(s3 - par).mean()), "d_dyck": float(np.abs(s3 - dy).mean())}
    if not ran:
        return claim("s3_groups_with_parity", st, None, reason="no architecture ran s3, parity and dyck")
    if not per:
        return _none_learned("s3_groups_with_parity", st, not_learned)
    closer = [a for a, d in per.items() if d["d_parity"] < d["d_dyck"]]
    return claim("s3_groups_with_parity", st, len(closer) > len(per) / 2, archs_closer_to_parity=closer,
                 n_archs=len(per), distances=per, not_learned=not_learned)


def direction_ablation(cells, margin: float = 0.02) -> Claim:
    st = (f"Projecting out the best probe direction (at the best probe layer) drops task accuracy more than "
          f"projecting out a random direction (by > {margin}, averaged over all evaluation lengths) in most learned cells")
    per, not_learned = {}, []
    for (a, t), c in cells.items():
        if "ablation" not in c:
            continue
        if not _learned(c):
            not_learned.append(f"{a}/{t}")
            continue
        pd = float(np.mean([v["drop"] for v in c["ablation"]["probe_dir"].values()]))
        rd = float(np.mean([v["drop"] for v in c["ablation"]["random_dir"].values()]))
        per[f"{a}/{t}"] = {"probe_dir_drop": pd, "random_dir_drop": rd}
    if not per and not not_learned:
        return claim("probe_direction_ablation_drops_accuracy", st, None, reason="no ablation was run")
    if not per:
        return _none_learned("probe_direction_ablation_drops_accuracy", st, sorted(not_learned))
    wins = [k for k, v in per.items() if v["probe_dir_drop"] > v["random_dir_drop"] + margin]
    return claim("probe_direction_ablation_drops_accuracy", st, len(wins) > len(per) / 2, n_cells=len(per),
                 n_cells_drop=len(wins), not_learned=sorted(not_learned),
                 mean_probe_dir_drop=float(np.mean([v["probe_dir_drop"] for v in per.values()])),
                 mean_random_dir_drop=float(np.mean([v["random_dir_drop"] for v in per.values()])), cells=per)


def conv1d(cells, min_drop: float = 0.05) -> Claim:
    st = (f"Removing Mamba's Conv1D hurts the prefix tasks (mean accuracy over lengths drops by >= {min_drop} "
          "on Parity+S3 on average) but not Dyck (drop < half of that)")
    drops = {}
    for t in PREFIX + ["dyck"]:
        a, b = cells.get(("mamba", t)), cells.get(("mamba-noconv", t))
        if a is not None and b is not None:
            drops[t] = _mean_acc(a) - _mean_acc(b)
    if not all(t in drops for t in PREFIX + ["dyck"]):
        return claim("conv1d_matters_for_prefix_not_dyck", st, None,
                     reason="Mamba with and without Conv1D was not run on parity, s3 and dyck", drops=drops)
    prefix = float(np.mean([drops[t] for t in PREFIX]))
    learned = {f"{v}/{t}": _learned(cells[(v, t)]) for t in PREFIX + ["dyck"] for v in ("mamba", "mamba-noconv")}
    return claim("conv1d_matters_for_prefix_not_dyck", st, prefix >= min_drop and drops["dyck"] < 0.5 * prefix,
                 prefix_drop=prefix, **{f"{t}_drop": d for t, d in drops.items()},
                 not_learned=sorted(k for k, v in learned.items() if not v),
                 note="compares task accuracy itself, so it does not need the models to have learned the task; "
                      "not_learned says which accuracies are below the learned threshold")


def readability_causality(cells) -> Claim:
    st = ("Readability and causal use split: in most learned cells the layer where the state is best linearly readable "
          "differs from the layer where projecting out the probe subspace hurts accuracy most")
    per, not_learned = {}, []
    for (a, t), c in cells.items():
        if "layer_ablation_drop" not in c:
            continue
        if not _learned(c):
            not_learned.append(f"{a}/{t}")
            continue
        drops = np.asarray(c["layer_ablation_drop"])
        causal = int(np.flatnonzero(drops >= drops.max() - TOL)[0])
        per[f"{a}/{t}"] = {"readable_layer": c["best_layer"], "causal_layer": causal}
    if not per and not not_learned:
        return claim("readability_vs_causality_split", st, None, reason="no cell was analysed")
    if not per:
        return _none_learned("readability_vs_causality_split", st, sorted(not_learned))
    split = [k for k, v in per.items() if v["readable_layer"] != v["causal_layer"]]
    return claim("readability_vs_causality_split", st, len(split) > len(per) / 2, n_cells=len(per),
                 n_split=len(split), cells=per, not_learned=sorted(not_learned))


def all_claims(cells) -> list[Claim]:
    return [late_in_recurrent(cells), gradual_in_transformer(cells), dyck_early(cells), s3_with_parity(cells),
            direction_ablation(cells), conv1d(cells), readability_causality(cells)]
