"""Figures of the state study (each returns a ``{"path", "caption"}`` entry)."""

from __future__ import annotations

import numpy as np

from dlmlab.report.figures import new_figure, save_figure

COLORS = {"transformer": "C0", "mamba": "C1", "mamba2": "C2", "lstm": "C3", "gru": "C4", "mamba-noconv": "C1"}


def _style(arch: str) -> dict:
    return {"color": COLORS.get(arch, "k"), "linestyle": "--" if arch.endswith("noconv") else "-", "marker": "o",
            "markersize": 3}


def probe_by_layer(cells, tasks, archs, out) -> dict:
    fig, ax = new_figure(ncols=len(tasks), width=3.6, height=3.2)
    for j, t in enumerate(tasks):
        a_ = ax[0, j]
        ctrl = []
        for a in archs:
            c = cells.get((a, t))
            if c is None or "probes" not in c:
                continue
            acc = [p["accuracy"] for p in c["probes"]]
            ctrl += [p["control_accuracy"] for p in c["probes"]]
            learned = bool(c.get("learned", False))
            st = dict(_style(a), **({} if learned else {"alpha": 0.35, "linestyle": ":"}))
            a_.plot(range(len(acc)), acc, label=a if learned else f"{a} (not learned)", **st)
            a_.plot([c["best_layer"]], [acc[c["best_layer"]]], marker="*", color=COLORS.get(a, "k"), markersize=10,
                    alpha=1.0 if learned else 0.35)
        if ctrl:
            a_.axhline(float(np.mean(ctrl)), color="grey", linestyle=":", label="control (mean)")
        a_.set_title(t)
        a_.set_xlabel("layer (0 = embedding)")
        a_.set_ylim(0, 1.02)
        if j == 0:
            a_.set_ylabel("held-out probe accuracy")
            a_.legend(fontsize=7)
    return save_figure(fig, out, "probe_by_layer",
                       "Probe accuracy by layer per architecture per task (star: best layer; grey dotted: control task; "
                       "faint dotted lines: models that did not learn the task)")


def ablation_drops(cells, tasks, archs, train_len, out) -> dict:
    kinds = ["probe_dir", "random_dir", "probe_subspace", "pca", "random_subspace"]
    fig, ax = new_figure(ncols=len(tasks), width=3.8, height=3.2)
    w = 0.8 / len(kinds)
    for j, t in enumerate(tasks):
        a_ = ax[0, j]
        present = [a for a in archs if "ablation" in cells.get((a, t), {})]
        for k, kind in enumerate(kinds):
            vals = [cells[(a, t)]["ablation"][kind][train_len]["drop"] for a in present]
            a_.bar(np.arange(len(present)) + k * w, vals, width=w, label=kind)
        a_.set_xticks(np.arange(len(present)) + 0.4 - w / 2)
        a_.set_xticklabels(present, rotation=45, fontsize=7)
        a_.axhline(0, color="k", linewidth=0.5)
        a_.set_title(t)
        if j == 0:
            a_.set_ylabel(f"accuracy drop (length {train_len})")
            a_.legend(fontsize=6)
    return save_figure(fig, out, "ablation_drops",
                       "Accuracy drop from projecting out directions at the best probe layer (train length)")


def ood_lengths(cells, tasks, archs, train_len, out) -> dict:
    fig, ax = new_figure(ncols=len(tasks), width=3.6, height=3.2)
    for j, t in enumerate(tasks):
        a_ = ax[0, j]
        for a in archs:
            c = cells.get((a, t))
            if c is None:
                continue
            lens = sorted(int(k) for k in c["acc_by_len"])
            a_.plot(lens, [c["acc_by_len"][L] for L in lens], label=a, **_style(a))
        a_.axvline(train_len, color="grey", linestyle=":")
        a_.set_title(t)
        a_.set_xlabel("sequence length")
        a_.set_ylim(0, 1.02)
        if j == 0:
            a_.set_ylabel("per-token accuracy")
            a_.legend(fontsize=7)
    return save_figure(fig, out, "ood_length", f"Per-token accuracy vs evaluation length (trained at {train_len})")


def patching(cells, tasks, archs, out) -> dict | None:
    tasks = [t for t in tasks if any("patching" in cells.get((a, t), {}) for a in archs)]
    if not tasks:
        return None
    fig, ax = new_figure(ncols=len(tasks), width=3.8, height=3.2)
    for j, t in enumerate(tasks):
        a_ = ax[0, j]
        for a in archs:
            c = cells.get((a, t), {})
            if "patching" not in c:
                continue
            pa = c["patching"]
            a_.plot(pa["at_corrupt_pos"], label=f"{a} @corrupt pos", **_style(a))
            a_.plot(pa["at_last_pos"], color=COLORS.get(a, "k"), linestyle=":", marker="x", markersize=3)
        a_.set_title(f"{t}: clean -> corrupted patching")
        a_.set_xlabel("layer (0 = embedding)")
        if j == 0:
            a_.set_ylabel("fraction of logit gap recovered")
            a_.legend(fontsize=6)
    return save_figure(fig, out, "patching", "Fraction of the final-position logit gap recovered by patching one "
                       "layer at the corrupted position (solid) or the last position (dotted)")
