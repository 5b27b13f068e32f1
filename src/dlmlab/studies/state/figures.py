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
            counted = bool(c.get("learned", False))  # the claims count learned cells only
            tag = "" if counted else " (partial)" if c.get("above_chance") else " (at chance)"
            st = dict(_style(a), **({} if counted else {"alpha": 0.35, "linestyle": ":"}))
            a_.plot(range(len(acc)), acc, label=a + tag, **st)
            b = c.get("best_block", c.get("best_layer", 0))
            a_.plot([b], [acc[b]], marker="*", color=COLORS.get(a, "k"), markersize=10, alpha=1.0 if counted else 0.35)
        if ctrl:
            a_.axhline(float(np.mean(ctrl)), color="grey", linestyle=":", label="control (mean)")
        a_.set_title(t)
        a_.set_xlabel("layer (0 = embedding)")
        a_.set_ylim(0, 1.02)
        if j == 0:
            a_.set_ylabel("held-out probe accuracy")
            a_.legend(fontsize=7)
    return save_figure(fig, out, "probe_by_layer",
                       "Probe accuracy by layer per architecture per task (star: best block; grey dotted: control task; "
                       "faint dotted lines: models at chance on the task, not counted by the claims)")


def ablation_drops(cells, tasks, archs, train_len, out) -> dict:
    kinds = ["probe_dir", "probe_subspace", "random_subspace"]
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
                       "Accuracy drop from projecting out directions at the best block (train length)")


def ood_lengths(cells, conv_runs, tasks, archs, train_len, out) -> dict:
    fig, ax = new_figure(ncols=len(tasks), width=3.6, height=3.2)
    for j, t in enumerate(tasks):
        a_ = ax[0, j]
        for a in archs:
            c = cells.get((a, t), conv_runs.get((a, t, 0)))
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
    return save_figure(fig, out, "ood_length", f"Per-token accuracy vs evaluation length (trained at {train_len}; "
                       "Mamba without Conv1D dashed, seed 0)")


def training_curves(cells, tasks, archs, out) -> dict:
    fig, ax = new_figure(ncols=len(tasks), width=3.6, height=3.2)
    for j, t in enumerate(tasks):
        a_ = ax[0, j]
        for a in archs:
            curve = cells.get((a, t), {}).get("curve") or []
            if curve:
                a_.plot([r[0] for r in curve], [r[1] for r in curve], label=a, **_style(a))
        a_.set_title(t)
        a_.set_xlabel("training step")
        a_.set_ylim(0, 1.02)
        if j == 0:
            a_.set_ylabel("training-batch accuracy")
            a_.legend(fontsize=7)
    return save_figure(fig, out, "training_curves", "Training-batch per-token accuracy over steps (the budget each "
                       "architecture had, and whether it was still rising)")


def patching_grid(cells, tasks, archs, out) -> dict | None:
    """Heat map per (task, architecture): fraction of the logit gap recovered per patched layer and position."""
    tasks = [t for t in tasks if any("patching" in cells.get((a, t), {}) for a in archs)]
    if not tasks:
        return None
    fig, ax = new_figure(nrows=len(tasks), ncols=len(archs) + 1, width=2.4, height=2.2)  # last column: colour bar
    im = None
    for i, t in enumerate(tasks):
        for j, a in enumerate(archs):
            a_ = ax[i, j]
            pa = cells.get((a, t), {}).get("patching")
            if pa is None:
                a_.axis("off")
                continue
            r = np.asarray(pa["recovered"], dtype=float)
            im = a_.imshow(r, vmin=-0.2, vmax=1.2, cmap="viridis", aspect="auto", origin="lower")
            a_.set_xticks(range(len(pa["positions"])))
            a_.set_xticklabels(pa["positions"], fontsize=6)
            a_.set_yticks(range(r.shape[0]))
            a_.tick_params(labelsize=6)
            a_.set_title(f"{t} / {a}", fontsize=8)
            if j == 0:
                a_.set_ylabel("layer", fontsize=7)
            if i == len(tasks) - 1:
                a_.set_xlabel("patched position", fontsize=7)
    if im is not None:
        for i in range(len(tasks)):
            ax[i, -1].axis("off")
        cax = ax[0, -1].inset_axes([0.05, 0.0, 0.12, 1.0])  # in a blank grid cell: tight_layout keeps its room
        fig.colorbar(im, cax=cax).set_label("fraction recovered", fontsize=7)
    return save_figure(fig, out, "patching_grid", "Activation patching clean -> corrupted per layer (rows, 0 = "
                       "embedding) and patched position (columns; the corrupted token in the middle): fraction of the "
                       "last position's logit gap recovered")


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
