"""Per (kind, PE) values over seeds with 95% intervals, and the study's tables."""

from __future__ import annotations

import math

import numpy as np

from dlmlab.report import Table
from dlmlab.report.claims import learned_level
from dlmlab.report.intervals import Interval, mean_ci, paired_diff_ci

LABELS = {"mdm": "MDM", "mdm_mdlm": "MDM (MDLM)", "arm": "ARM"}
ORDER = ("alibi", "rope", "learned")  # the study's ordering of reverse transfer, best first
DIAGNOSTICS = ("fwd_evidence_alpha", "rev_evidence_alpha", "fwd_evidence_routed", "rev_evidence_routed",
               "storage_margin", "positional_corr")


def learned_step(history: list[dict], chance: float) -> int | None:
    """The first logged step whose forward accuracy reaches :func:`~dlmlab.report.claims.learned_level` of
    ``chance`` (None: never within the run)."""
    need = learned_level(chance)
    return next((row["step"] for row in history if row["fwd_acc"] >= need), None)


def after_learned(history: list[dict], key: str, chance: float) -> float:
    """Mean of ``key`` over the logged steps from :func:`learned_step` to the end (NaN when the forward facts were
    never learned): the value of a signature once the model knows the facts, not at initialisation, where a
    model that knows nothing can show it by construction (issue 34: the storage-column cosine is ~1 at step 0)."""
    s = learned_step(history, chance)
    return math.nan if s is None else float(np.mean([row[key] for row in history if row["step"] >= s]))


def run_values(run: dict, train_distances: list[int] | None = None) -> dict[str, float]:
    """Scalars of one run: final metrics, initial reverse p, AUC and mean gradient cosines over training
    (``storage_grad_cos_mean``: the study's storage-column cosine over every logged step; ``grad_cos_mean``: the
    whole-W_v/W_o cosine, the definition before issue 27), ``storage_grad_cos_learned``: the storage-column cosine
    averaged from the step the forward facts are learned (:func:`after_learned`; the claim's quantity) and
    ``storage_grad_cos_init`` its value at step 0 (reference), final diagnostics; ``score_corr_train``: full-score
    correlation averaged over the training distances."""
    h = run["history"]
    v = {k: float(run["final"][k]) for k in ("fwd_acc", "fwd_p", "rev_acc", "rev_p")}
    v["initial_rev_p"] = float(run["initial_rev_p"])
    v["rev_auc"] = float(np.mean([row["rev_p"] for row in h]))
    if all("storage_grad_cos" in row for row in h):
        v["storage_grad_cos_mean"] = float(np.mean([row["storage_grad_cos"] for row in h]))
        v["storage_grad_cos_init"] = float(h[0]["storage_grad_cos"])
        if "chance" in run:
            v["storage_grad_cos_learned"] = after_learned(h, "storage_grad_cos", float(run["chance"]))
    v["grad_cos_mean"] = float(np.mean([row["grad_cos"] for row in h]))
    v["param_cos_mean"] = float(np.mean([row["param_cos"] for row in h]))
    d = run["diagnostics"]
    v.update({k: float(d[k]) for k in DIAGNOSTICS if k in d})
    if "corr_by_distance" in d and train_distances:
        by = {int(k): x for k, x in d["corr_by_distance"].items()}
        v["score_corr_train"] = float(np.nanmean([by[k] for k in train_distances if k in by]))
    return v


def summarize(runs: list[dict], kinds, positions, train_distances: list[int] | None = None) -> dict:
    """{"kind/pe": {"seeds": [...], "values": {metric: [per seed]}, "ci": {metric: interval dict}}}, seeds sorted
    so that lists of two groups pair up by seed; intervals: Student-t over the seeds (``n`` in each)."""
    out = {}
    for kind in kinds:
        for pe in positions:
            g = sorted((r for r in runs if r["kind"] == kind and r["positions"] == pe), key=lambda r: r["seed"])
            if not g:
                continue
            vals = [run_values(r, train_distances) for r in g]
            keys = [k for k in vals[0] if all(k in v for v in vals)]
            out[f"{kind}/{pe}"] = group([r["seed"] for r in g], {k: [v[k] for v in vals] for k in keys})
    return out


#: metrics that are accuracies or probabilities: their intervals are clipped to [0, 1] (report.intervals.clip)
BOUNDED = ("fwd_acc", "fwd_p", "rev_acc", "rev_p", "initial_rev_p", "rev_auc")


def group(seeds: list[int], values: dict[str, list[float]]) -> dict:
    """One summary entry: per-seed ``values`` (lists in the order of ``seeds``) and their intervals (those of the
    :data:`BOUNDED` metrics clipped to [0, 1])."""
    return {"seeds": list(seeds), "values": values,
            "ci": {k: mean_ci(x, bounds=(0, 1) if k in BOUNDED else None).as_dict() for k, x in values.items()}}


def vals(summary: dict, kind: str, pe: str, key: str) -> list[float]:
    return summary[f"{kind}/{pe}"]["values"][key]


def ci(summary: dict, kind: str, pe: str, key: str) -> Interval:
    return Interval(**summary[f"{kind}/{pe}"]["ci"][key])


def diff(summary: dict, a: tuple[str, str], b: tuple[str, str], key: str) -> Interval:
    """Paired-by-seed interval of ``key`` in group a minus group b (each a (kind, pe))."""
    sa, sb = summary[f"{a[0]}/{a[1]}"], summary[f"{b[0]}/{b[1]}"]
    if sa["seeds"] != sb["seeds"]:
        raise ValueError(f"groups {a} and {b} ran different seeds: {sa['seeds']} vs {sb['seeds']}")
    return paired_diff_ci(sa["values"][key], sb["values"][key])


def _f(summary, kind, pe, key) -> str:
    s = summary[f"{kind}/{pe}"]
    return ci(summary, kind, pe, key).fmt() if key in s["ci"] else "n/a"


def tables(summary: dict, kinds, positions, chance: float, part: str | None = None) -> list[Table]:
    """Table 1 (every model x PE), Table 2 (MDM reverse transfer per PE: the primary result), Table 3 (signatures)."""
    groups = [(k, pe) for k in kinds for pe in positions if f"{k}/{pe}" in summary]
    rows = [[LABELS[k], pe, _f(summary, k, pe, "fwd_acc"), _f(summary, k, pe, "rev_acc"), _f(summary, k, pe, "rev_p"),
             len(summary[f"{k}/{pe}"]["seeds"])] for k, pe in groups]
    title = "Table 1: forward and reverse accuracy, mean [95% t-interval] over seeds"
    t1 = Table(title + (f", {part}" if part else ""),
               ["model", "positions", "forward acc", "reverse acc", "reverse p(A)", "seeds"], rows,
               note=f"Forward = the trained query (MDM '[M] r.. B' -> A, ARM 'A r..' -> B); reverse = 'B r.. [M]' / "
                    f"'B r..' -> A, never trained. Chance accuracy among the A entities = {chance:.4f}.")
    out = [t1]
    if "mdm" in kinds:
        out.append(table2(summary, positions, "Table 2: reverse transfer of the forward-only MDM per positional "
                                              "encoding, offset task (primary result)", "pe_ordering"))
        rows = []
        for k, pe in groups:
            rows.append([LABELS[k], pe, _f(summary, k, pe, "positional_corr"), _f(summary, k, pe, "score_corr_train"),
                         _f(summary, k, pe, "storage_grad_cos_learned"), _f(summary, k, pe, "storage_grad_cos_init"),
                         _f(summary, k, pe, "storage_grad_cos_mean"), _f(summary, k, pe, "grad_cos_mean"),
                         _f(summary, k, pe, "param_cos_mean"),
                         _f(summary, k, pe, "fwd_evidence_alpha"), _f(summary, k, pe, "rev_evidence_alpha"),
                         _f(summary, k, pe, "storage_margin")])
        out.append(Table("Table 3: storage-routing signatures (mean [95% t-interval] over seeds)",
                         ["model", "positions", "positional score corr", "full score corr (train distances)",
                          "grad cos on Y[:, B] once learned", "grad cos on Y[:, B] at step 0",
                          "grad cos on Y[:, B] (all steps)", "grad cos on W_v, W_o (per fact)",
                          "grad cos on W_v, W_o (batch)", "alpha fwd", "alpha rev", "storage margin"], rows,
                         note="positional score corr: correlation across distances 1..max_distance of the forward and "
                              "reverse query->B score averaged over facts (the positional part); full score corr: "
                              "correlation across facts at each training distance (content included); grad cos on "
                              "Y[:, B]: per fact, cosine of the forward- and reverse-loss gradients on the storage "
                              "column of B (the study's quantity), averaged over the logged steps from the first one at which "
                              "the forward facts are learned (gradient_alignment_positive; n/a: never learned), at "
                              "step 0 (reference: ~1 before any training) and over every logged step; on W_v, W_o: "
                              "the same on the whole value/output weights (autograd; per fact, or of the batch loss; "
                              "the definition before issue 27), averaged over the logged training steps; alpha: "
                              "attention to the evidence (sum over heads); storage margin: Y[A_k, B_k] - mean_a "
                              "Y[a, B_k]."))
    return out


def table2(summary: dict, positions, title: str, claim_id: str) -> Table:
    """The MDM's final reverse accuracy / p(A) per PE in the study's order and the paired differences."""
    order = [pe for pe in ORDER if pe in positions]
    rows = []
    for i, pe in enumerate(order):
        nxt = order[i + 1] if i + 1 < len(order) else None
        d = diff(summary, ("mdm", pe), ("mdm", nxt), "rev_p").fmt() if nxt else "-"
        rows.append([pe, _f(summary, "mdm", pe, "rev_acc"), _f(summary, "mdm", pe, "rev_p"),
                     f"{pe} - {nxt}: {d}" if nxt else d, _f(summary, "mdm", pe, "fwd_acc")])
    return Table(title, ["positions", "final reverse acc", "final reverse p(A)", "paired difference in reverse p",
                         "forward acc"], rows,
                 note="Mean [95% Student-t interval] over seeds (n seeds and the method beside each); the paired "
                      f"difference pairs runs of the same seed. {claim_id} holds when both differences lie above 0.")


def pair_table(pair_summary: dict, positions) -> Table:
    """Table 2 on the study's fixed-layout pair task ("[M] r B" / "B r [M]" at fixed positions)."""
    return table2(pair_summary, positions, "Table 2b: reverse transfer of the forward-only MDM on the study's "
                                           "fixed-layout pair task", "pe_ordering_fixed_layout")
