"""Shared parts of the state study's claims: constants, profile descriptors and margins, which cells count.

The claims themselves are in :mod:`.claims` (layer profiles) and :mod:`.claims_mech` (ablations, Conv1D).

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

Seeds: a profile claim judges each (architecture, task) over its seeds (``seed_cells``, the preset's
``profile_seeds``): it counts when most of its seeds learned, and its verdict is the 95% t-interval over the learned
seeds of the claim's criterion as a margin (:func:`late_margin`, :func:`gradual_margin`, :func:`early_margin`:
> 0 exactly when the criterion holds) against 0; with one seed, the sign of that seed's margin.

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
from dlmlab.report.claims import (REPRODUCED, Judgement, contradicted, interval_verdict, learned_level, not_run,
                                  precondition_failed)
from dlmlab.report.intervals import mean_ci

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


def late_margin(acc) -> float:
    """Probe-accuracy jump into the last layer minus the largest jump into any earlier layer (embedding
    included): > 0 exactly when the largest jump enters the last layer (:func:`is_late`)."""
    j = np.diff(np.asarray(acc, dtype=float))
    return float(j[-1] - j[:-1].max()) if len(j) > 1 else float(j[-1])


def gradual_margin(cell) -> float:
    """min(block gain - 0.1, 0.6 x block gain - largest block step): >= 0 exactly when the profile is gradual."""
    r = gradual_row(cell)
    return float(min(r["gain"] - GRADUAL_MIN_GAIN, GRADUAL_MAX_SHARE * r["gain"] - r["max_step"]))


def early_margin(cell) -> float:
    """n_layers // 2 + 0.5 - best block: > 0 exactly when the best block is in the first half (:func:`is_early`)."""
    return float(cells_n(cell) // 2 + 0.5 - best_block(cell))


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
    got, lists = split_groups({k: [c] for k, c in items.items()})
    return {k: g[0] for k, g in got.items()}, lists


def split_groups(groups: dict) -> tuple[dict, dict]:
    """{name: [cell of each seed]} -> ({name: [learned cells]} for the groups where most seeds learned, evidence
    lists as :func:`_split`'s; a group's row is its first seed's, with ``learned_seeds`` "k of n")."""
    got, rows = {}, {}
    for k, g in sorted(groups.items()):
        ok = [c for c in g if is_learned(c)]
        if len(ok) > len(g) / 2:
            got[k] = ok
        else:
            rows[k] = dict(_not_learned_row(g[0]), **({"learned_seeds": f"{len(ok)} of {len(g)}",
                                                         "seed_accs": [_train_acc_chance(c)[0] for c in g]}
                                                        if len(g) > 1 else {}))
    return got, {"not_learned": rows, "at_chance": [k for k, r in rows.items() if r["status"] == "at chance"],
                 "partial": [k for k, r in rows.items() if r["status"] == "partial"]}


def groups_of(cells: dict, seed_cells: dict | None, keys) -> dict:
    """{"arch/task": [seed-0 cell, cells of the further seeds]} for the ``keys`` (arch, task) with probes."""
    return {f"{a}/{t}": [cells[(a, t)]] + [c for c in (seed_cells or {}).get((a, t), []) if "probes" in c]
            for a, t in keys if "probes" in cells.get((a, t), {})}


def margin_verdict(name: str, margins: list[float], what: str, profile: str = "") -> tuple[Judgement, dict]:
    """Verdict of "``what`` > 0" for one (architecture, task) from its learned seeds' margins: one seed -> its sign;
    several -> the 95% t-interval over seeds against 0 (n shown).  ``profile``: the first seed's profile in words
    (for the detail of a one-seed contradiction)."""
    if len(margins) == 1:
        m = margins[0]
        return (REPRODUCED if m > 0 else contradicted(f"{name}: {profile + ', ' if profile else ''}{what} {m:+.3f} "
                                                      "(1 seed)")), {"margins": margins}
    iv = mean_ci(margins)
    return interval_verdict(iv, +1, 0.0, what=f"{name} {what}"), {"margins": margins, "interval": iv.as_dict(),
                                                                  "interval_text": iv.fmt()}


def _nl_text(k: str, r: dict) -> str:
    if "learned_seeds" in r:
        accs = ", ".join("?" if a is None else f"{a:.2f}" for a in r["seed_accs"])
        return f"{k} (learned in {r['learned_seeds']} seeds; acc {accs}, learned level {r.get('learned_level', 0):.2f})"
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




def budget_parts(skipped: dict | None, names) -> list[Judgement]:
    """One ``not_run`` part per named cell ("arch/task") that the preset left untrained for budget (``skipped``)."""
    return [not_run(f"{k} not run (budget)") for k in names if k in (skipped or {})]


def budget_only(cid: str, st: str, names: list[str]) -> Claim:
    """A claim every one of whose cells was left untrained for budget: inconclusive / not_run (budget)."""
    why = f"{', '.join(names)} not run (budget: the preset's steps cannot make them learn)"
    return _judged(cid, st, not_run(why), reason=why, not_run_budget=names)
