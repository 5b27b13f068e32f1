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


def attention_correlation_figure(runs: list[dict], kinds: list[str], positions: list[str],
                                 train_distances: list[int], out: Path) -> dict:
    """Left: full-score correlation across facts by distance; right: the positional part (score averaged over
    facts, mean over heads and seeds, centred) of the forward (solid) and reverse (dashed) query by distance."""
    fig, axes = new_figure(ncols=2, width=5.0)
    left, right = axes[0, 0], axes[0, 1]
    for kind in kinds:
        for pe in positions:
            g = [r for r in _group(runs, kind, pe) if "corr_by_distance" in r["diagnostics"]]
            if not g:
                continue
            ds = sorted(int(d) for d in g[0]["diagnostics"]["corr_by_distance"])
            vals = np.array([[r["diagnostics"]["corr_by_distance"][d] for d in ds] for r in g], dtype=float)
            m, s = np.nanmean(vals, 0), np.nanstd(vals, 0)
            lab = f"{LABELS.get(kind, kind)} {pe}"
            left.plot(ds, m, marker="o", ms=3, ls=STYLES.get(kind, "-"), color=COLORS.get(pe), label=lab)
            left.fill_between(ds, m - s, m + s, color=COLORS.get(pe), alpha=0.15)
            for key, ls in (("profile_forward", "-"), ("profile_reverse", "--")):
                prof = np.array([np.asarray(r["diagnostics"][key]).mean(1) for r in g]).mean(0)  # [D]
                right.plot(ds, prof - prof.mean(), ls=ls, color=COLORS.get(pe),
                           label=f"{lab} {'forward' if ls == '-' else 'reverse'}")
    for ax in (left, right):
        for d in train_distances:
            ax.axvline(d, color="gray", ls=":", lw=0.6)
        ax.set_xlabel("distance between [M] and B")
        ax.legend(fontsize=7)
    left.axhline(0, color="black", lw=0.5)
    left.set_ylabel("corr across facts (full score)")
    left.set_title("Forward vs reverse score on B", fontsize=10)
    right.set_ylabel("score averaged over facts (centred)")
    right.set_title("Positional part by distance", fontsize=10)
    return save_figure(fig, out, "attention_correlation",
                       "Left: Pearson correlation across facts of the pre-softmax score [M]->B in the forward query "
                       "'[M] r.. B' and the reverse query 'B r.. [M]' at each distance (MDM, mean +- std over seeds). "
                       "Right: the positional part, the score averaged over facts (mean over heads and seeds, centred) "
                       "by distance, forward solid and reverse dashed; dotted lines: the training distances.")


def _training_panels(runs, kinds, positions, key, ylabel, title, out, name, caption, extra_key=None, log=False,
                     hline=None):
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
        if hline is not None:
            ax.axhline(hline, color="gray", lw=0.8)
        ax.set_xlabel("training step (forward-only)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{LABELS.get(kind, kind)}: {title}", fontsize=10)
        ax.legend(fontsize=8)
    return save_figure(fig, out, name, caption)


def gradient_cosine_figure(runs, kinds, positions, level: float, out: Path) -> dict:
    return _training_panels(
        runs, kinds, positions, "storage_grad_cos", "cos(grad fwd, grad rev)", "storage-gradient alignment", out,
        "gradient_cosine",
        "Solid: per-fact cosine between the forward-loss and the reverse-loss gradients on the storage column Y[:, B] "
        "(the study's quantity) over training (mean over facts, mean +- std over seeds). Dotted: the same per-fact "
        "cosine on the whole value/output weights W_v, W_o (autograd; the definition before issue 27). Gray: the "
        f"claim's level {level}.", extra_key="grad_cos", hline=level)


def reverse_probability_figure(runs, kinds, positions, chance: float, out: Path) -> dict:
    info = _training_panels(
        runs, kinds, positions, "rev_p", "p(correct A | reverse query)", "reverse probability", out,
        "reverse_probability",
        f"Probability of the correct A on the never-trained reverse query 'B r.. [M]' (ARM: 'B r..' -> next token) "
        f"over forward-only training; dotted: the trained forward query. Chance = {chance:.4f}.",
        extra_key="fwd_p")
    return info


def all_figures(runs, kinds, positions, train_distances, chance: float, out: Path, level: float = 0.5) -> list[dict]:
    """The study's figures: attention signatures (MDM kinds), gradient cosine and reverse probability over training."""
    figs = []
    mdm_kinds = [k for k in kinds if k.startswith("mdm")]
    if mdm_kinds:
        figs.append(attention_correlation_figure(runs, mdm_kinds, positions, train_distances, out))
    figs.append(gradient_cosine_figure(runs, kinds, positions, level, out))
    figs.append(reverse_probability_figure(runs, kinds, positions, chance, out))
    return figs
