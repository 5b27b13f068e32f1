"""Figures of the reversal study (matplotlib via :mod:`dlmlab.report.figures`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dlmlab.report.figures import new_figure, save_figure

COLORS = {"learned": "tab:blue", "rope": "tab:orange", "alibi": "tab:green"}


def _group(runs: list[dict], kind: str, pe: str) -> list[dict]:
    return [r for r in runs if r["kind"] == kind and r["positions"] == pe]


def _curve(group: list[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps = np.array([row["step"] for row in group[0]["history"]])
    vals = np.array([[row[key] for row in r["history"]] for r in group], dtype=float)
    return steps, vals.mean(0), vals.std(0)


LABELS = {"mdm": "MDM", "mdm_mdlm": "MDM (MDLM)", "arm": "ARM"}
STYLES = {"mdm": "-", "mdm_mdlm": "--"}


def attention_correlation_figure(runs: list[dict], kinds: list[str], positions: list[str], train_distance: int,
                                 out: Path) -> dict:
    fig, axes = new_figure(width=6.0)
    ax = axes[0, 0]
    for kind in kinds:
        for pe in positions:
            g = [r for r in _group(runs, kind, pe) if "corr_by_distance" in r["diagnostics"]]
            if not g:
                continue
            ds = sorted(int(d) for d in g[0]["diagnostics"]["corr_by_distance"])
            vals = np.array([[r["diagnostics"]["corr_by_distance"][d] for d in ds] for r in g], dtype=float)
            m, s = np.nanmean(vals, 0), np.nanstd(vals, 0)
            ax.plot(ds, m, marker="o", ms=3, ls=STYLES.get(kind, "-"), color=COLORS.get(pe),
                    label=f"{LABELS.get(kind, kind)} {pe}")
            ax.fill_between(ds, m - s, m + s, color=COLORS.get(pe), alpha=0.15)
    ax.axvline(train_distance, color="gray", ls=":", lw=1, label="training distance")
    ax.axhline(0, color="black", lw=0.5)
    ax.set_xlabel("distance between [M] and B")
    ax.set_ylabel("corr(forward score, reverse score)")
    ax.set_title("Forward vs reverse attention on the evidence token")
    ax.legend(fontsize=8)
    return save_figure(fig, out, "attention_correlation",
                       "Pearson correlation across facts of the pre-softmax score [M]->B in the forward query "
                       "'[M] .. B' and the reverse query 'B .. [M]', by distance (MDM, mean +- std over seeds).")


def _training_panels(runs, kinds, positions, key, ylabel, title, out, name, caption, extra_key=None, log=False):
    fig, axes = new_figure(ncols=len(kinds), width=4.5)
    for ax, kind in zip(axes[0], kinds):
        for pe in positions:
            g = _group(runs, kind, pe)
            if not g:
                continue
            x, m, s = _curve(g, key)
            ax.plot(x, m, color=COLORS.get(pe), label=f"{pe}")
            ax.fill_between(x, m - s, m + s, color=COLORS.get(pe), alpha=0.2)
            if extra_key:
                x, m, _ = _curve(g, extra_key)
                ax.plot(x, m, color=COLORS.get(pe), ls=":", lw=1)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("training step (forward-only)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{LABELS.get(kind, kind)}: {title}", fontsize=10)
        ax.legend(fontsize=8)
    return save_figure(fig, out, name, caption)


def gradient_cosine_figure(runs, kinds, positions, out: Path) -> dict:
    return _training_panels(
        runs, kinds, positions, "grad_cos", "cos(grad fwd, grad rev)", "gradient alignment", out,
        "gradient_cosine",
        "Solid: cosine between the forward-loss and reverse-loss gradients on the storage column Y[:, B], over "
        "training (mean +- std over seeds, mean over facts; 0 when the forward query never reads B, as for the ARM). "
        "Dotted: cosine of the full parameter gradients of the two losses.", extra_key="param_cos")


def reverse_probability_figure(runs, kinds, positions, chance: float, out: Path) -> dict:
    info = _training_panels(
        runs, kinds, positions, "rev_p", "p(correct A | reverse query)", "reverse probability", out,
        "reverse_probability",
        f"Probability of the correct A on the never-trained reverse query 'B is [M]' (ARM: 'B is' -> next token) "
        f"over forward-only training; dotted: the trained forward query. Chance = {chance:.4f}.",
        extra_key="fwd_p")
    return info
