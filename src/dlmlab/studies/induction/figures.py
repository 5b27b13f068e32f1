"""Figures of the induction study (PNG via ``dlmlab.report.figures``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dlmlab.analysis.heads import attention_patterns
from dlmlab.report.figures import new_figure, save_figure


def attention_figure(out: Path, examples: list[tuple[str, object, torch.Tensor, list[tuple[int, int, str]]]]) -> dict:
    """examples: (model label, model, tokens [1, T], [(layer, head, role)]) -> one row of patterns per model."""
    ncols = max(len(h) for _, _, _, h in examples)
    fig, axes = new_figure(ncols=ncols, nrows=len(examples), width=3.2, height=3.0)
    for r, (label, model, x, hs) in enumerate(examples):
        pats = attention_patterns(model, x)
        for c in range(ncols):
            ax = axes[r][c]
            if c >= len(hs):
                ax.axis("off")
                continue
            layer, head, role = hs[c]
            ax.imshow(pats[layer][0, head].numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"{label} L{layer}H{head}\n{role}", fontsize=8)
            ax.set_xlabel("key", fontsize=7)
            ax.set_ylabel("query", fontsize=7)
            ax.tick_params(labelsize=6)
    return save_figure(fig, out, "attention_patterns",
                       "Attention patterns of the key heads on one repeated random sequence (DLM inputs 15% masked): "
                       "previous-/next-token heads (offset diagonals) and induction heads (diagonal offset by half).")


def ablation_figure(out: Path, models: dict[str, dict]) -> dict:
    keys = [k for k in models if models[k]["n_layers"] >= 2] or list(models)
    fig, axes = new_figure(ncols=len(keys), width=3.0, height=2.8)
    for ax, k in zip(axes[0], keys):
        d = np.asarray(models[k]["ablation"]["mean_drop"])
        im = ax.imshow(d, cmap="Reds", vmin=0, vmax=max(0.05, float(np.nanmax(d))))
        ax.set_title(f"{k}\n(base acc {models[k]['ablation']['base']:.2f})", fontsize=8)
        ax.set_xlabel("head", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
        ax.set_xticks(range(d.shape[1]))
        ax.set_yticks(range(d.shape[0]))
        for i in range(d.shape[0]):
            for j in range(d.shape[1]):
                ax.text(j, i, f"{d[i, j]:.2f}", ha="center", va="center", fontsize=6)
        fig.colorbar(im, ax=ax, fraction=0.046)
    return save_figure(fig, out, "ablation_heatmap",
                       "Drop of forward induction accuracy when one head is mean-ablated (layer x head).")


def context_bars(out: Path, models: dict[str, dict]) -> dict:
    keys = sorted(models, key=lambda k: (models[k]["n_layers"], models[k]["objective"]))
    fig, axes = new_figure(ncols=2, width=max(5.0, 0.9 * len(keys)), height=3.4)
    width = 0.27
    for ax, direction in zip(axes[0], ("forward", "reverse")):
        x = np.arange(len(keys))
        for i, c in enumerate(("left", "right", "both")):
            vals = [models[k]["accuracy"][direction][c] for k in keys]
            vals = [np.nan if v is None else v for v in vals]
            ax.bar(x + (i - 1) * width, vals, width, label=f"{c}")
        ax.set_xticks(x)
        ax.set_xticklabels(keys, rotation=30, fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{direction} induction", fontsize=9)
        ax.legend(fontsize=7)
    return save_figure(fig, out, "context_bars",
                       "Induction accuracy by visible context (left-only / right-only / both); AR models have left only.")


def probe_figure(out: Path, models: dict[str, dict]) -> dict:
    fig, axes = new_figure(width=4.5, height=3.2)
    ax = axes[0][0]
    for i, (k, m) in enumerate(sorted(models.items())):
        if "probe" in m:
            r2 = m["probe"]["r2"]
            lo, hi = m["probe"].get("t_range", ["?", "?"])
            ax.plot(range(len(r2)), r2, marker="o", color=f"C{i}", label=f"{k}, t in [{lo}, {hi}] (training)")
        if "probe_full_range" in m:
            r2 = m["probe_full_range"]["r2"]
            ax.plot(range(len(r2)), r2, marker="s", ls="--", color=f"C{i}", label=f"{k}, t in [0, 1]")
    ax.set_xlabel("residual point (0 = embedding, i = after block i-1)")
    ax.set_ylabel("held-out R^2")
    ax.set_title("ridge probe of the global mask fraction", fontsize=9)
    ax.legend(fontsize=7)
    return save_figure(fig, out, "probe_r2", "Held-out R^2 of the mask-rate probe per residual point (DLMs), over the "
                       "training mask rates (solid) and the full range [0, 1] (dashed), on the same checkpoint.")


CURVE_LABELS = {"prev_layer0": "best layer-0 previous-token score", "next_layer0": "best layer-0 next-token score",
                "probe_r2_block0": "mask-rate probe R^2 after block 0"}


def emergence_figure(out: Path, models: dict[str, dict], min_rise: float = 0.2) -> dict:
    """Left: induction accuracy over checkpoints with the jump step (marked where the curve rises by >= ``min_rise``);
    right panels: the other quantities.  One colour per model in every panel."""
    keys = sorted(k for k in models if "emergence" in models[k])
    colour = {k: f"C{i}" for i, k in enumerate(keys)}
    names = sorted({n for k in keys for n in models[k]["emergence"].get("curves", {})})
    fig, axes = new_figure(ncols=1 + len(names), width=4.6, height=3.4)
    ax = axes[0][0]
    for k in keys:
        e = models[k]["emergence"]
        steps, vals = zip(*e["curve"])
        ax.plot(steps, vals, marker=".", color=colour[k], label=k)
        if e["midpoint_step"] is not None and e["max"] - e["start"] >= min_rise:
            ax.axvline(e["midpoint_step"], color=colour[k], ls=":", lw=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("forward induction accuracy")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7)
    for ax, n in zip(axes[0][1:], names):
        for k in keys:
            curve = models[k]["emergence"].get("curves", {}).get(n)
            if curve:
                steps, vals = zip(*curve)
                ax.plot(steps, vals, marker=".", color=colour[k], label=k)
        ax.set_xlabel("training step")
        ax.set_title(CURVE_LABELS.get(n, n), fontsize=8)
        ax.set_ylim(min(0.0, ax.get_ylim()[0]), 1.05)
        ax.legend(fontsize=7)
    return save_figure(fig, out, "emergence",
                       "Over saved checkpoints: forward induction accuracy (AR: left context, DLM: both sides; dotted: "
                       f"midpoint (jump) step, where the curve rises by >= {min_rise}), and the best layer-0 "
                       "previous/next-token scores and the mask-rate probe's R^2 after block 0.")


def local_window_figure(out: Path, models: dict[str, dict]) -> dict:
    keys = [k for k in sorted(models) if "local_window" in models[k]]
    fig, axes = new_figure(width=max(4.0, 1.2 * len(keys)), height=3.2)
    ax = axes[0][0]
    conds = ("none", "pm1", "pm2_only", "pm1_pm2", "far2")
    x = np.arange(len(keys))
    w = 0.16
    for i, c in enumerate(conds):
        ax.bar(x + (i - 2) * w, [models[k]["local_window"][c] for k in keys], w, label=c)
    ax.set_xticks(x)
    ax.set_xticklabels(keys, fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("forward accuracy (both sides)")
    ax.legend(fontsize=7)
    return save_figure(fig, out, "local_window",
                       "Local-window sensitivity: target alone vs +-1, only +-2, and +-1/+-2 neighbours also masked, "
                       "and two far positions masked instead (the control); low background mask rate.")


TWOWAYS_STYLE = {"masked": ("-", "C0", "15%-masked eval rows"), "random": ("--", "C1", "unmasked random rows"),
                 "text": (":", "C2", "unmasked repeated text")}


def heads_twoways_figure(out: Path, models: dict[str, dict]) -> dict:
    """One row per model: the best layer-0 previous-/next-token score and the best induction score (layers >= 1)
    over checkpoints, one line per input (15%-masked / unmasked random / unmasked text); grey: forward accuracy,
    dotted vertical: the accuracy curve's midpoint (jump) step."""
    keys = sorted((k for k in models if models[k].get("heads_twoways")),
                  key=lambda k: (models[k]["n_layers"], models[k]["objective"]))
    scores = (("prev", "best layer-0 previous-token score"), ("next", "best layer-0 next-token score"),
              ("induction", "best induction score (layers >= 1)"))
    fig, axes = new_figure(ncols=len(scores), nrows=max(1, len(keys)), width=3.6, height=2.6)
    for r, k in enumerate(keys):
        m = models[k]
        summary = m["heads_twoways"]["summary"]
        e = m.get("emergence")
        for c, (name, title) in enumerate(scores):
            ax = axes[r][c]
            if e:
                steps, vals = zip(*e["curve"])
                ax.plot(steps, vals, color="0.6", lw=1.2, label="forward induction accuracy")
                if e.get("midpoint_step") is not None:
                    ax.axvline(e["midpoint_step"], color="0.4", ls=":", lw=0.8)
            for cond, sc in summary.items():
                s = sc.get(name)
                if not s or not s["curve"]:
                    continue
                ls, col, lab = TWOWAYS_STYLE.get(cond, ("-", "C3", cond))
                steps, vals, _ = zip(*s["curve"])
                ax.plot(steps, vals, ls=ls, color=col, marker=".", ms=3,
                        label=f"{lab} (final L{s['head'][0]}H{s['head'][1]})")
            ax.set_ylim(0, 1.05)
            ax.set_title(f"{k}: {title}", fontsize=8)
            ax.set_xlabel("training step", fontsize=7)
            ax.tick_params(labelsize=6)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=5)
    return save_figure(fig, out, "heads_twoways",
                       "Heads measured two ways over training: each score's best head on the 15%-masked evaluation "
                       "rows (DLMs), on unmasked random rows and on unmasked repeated text (a few rows each); grey: "
                       "forward induction accuracy, dotted: its jump (midpoint) step.")
