"""Side-by-side view of several fine-tuning runs of :mod:`dlmlab.studies.reversal.hf_finetune` (e.g. LLaDA,
Dream, LLaMA, Qwen on the same facts): one table of the final values with their controls and one figure of
the three signatures over training.  Descriptive only: no claim is decided here.

Usage::

    python -m dlmlab.studies.reversal.hf_summary runs/rev_llada_p2d runs/rev_dream_p2d runs/rev_llama_p2d \\
        runs/rev_qwen_p2d --out runs/rev_summary

writes ``OUT/summary.md`` (the table) and ``OUT/figures/signatures.png``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlmlab.config import load_json_file
from dlmlab.errors import UserError
from dlmlab.files import atomic_write_text
from dlmlab.report.figures import new_figure, save_figure
from dlmlab.report.results import Table, markdown_table


def load_runs(dirs: list[str | Path]) -> dict[str, dict]:
    """Folder name -> its results.json (a one-line UserError for a folder without one)."""
    runs = {}
    for d in dirs:
        d = Path(d)
        f = d / "results.json"
        if not f.exists():
            raise UserError(f"{d} holds no results.json (not a finished hf_finetune run)")
        runs[d.name] = load_json_file(f, "results file")
    if not runs:
        raise UserError("give at least one run folder")
    return runs


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)


def summary_table(runs: dict[str, dict]) -> Table:
    """Final accuracies, reverse probability vs the other candidates', and the last signatures vs their controls."""
    rows = []
    for name, r in runs.items():
        s = r["signatures"][-1]
        rows.append([name, r["format"], r["objective"], "LoRA" if r["lora"] else "full", _fmt(r["chance"]),
                     _fmt(r["forward_acc"]), _fmt(r["reverse_acc"]),
                     f"{_fmt(s['reverse_p'])} / {_fmt(s['reverse_p_control'])}",
                     f"{_fmt(r['signatures'][0]['reverse_p'])} -> {_fmt(s['reverse_p'])}",
                     f"{_fmt(s['grad_cosine'])} / {_fmt(s['grad_cosine_control'])}",
                     f"{_fmt(s.get('attn_corr'))} / {_fmt(s.get('attn_corr_control'))}"])
    return Table("Reversal fine-tuning runs (forward-only), final step",
                 ["run", "format", "objective", "tuning", "chance", "forward acc", "reverse acc",
                  "reverse p: true / others", "reverse p: start -> end", "grad cosine / control",
                  "attn corr / control"], rows,
                 note="p: mean per-token probability of a completion under the reverse prompts; 'others' are the other "
                      "facts' completions (control).  Gradient cosine on the storage weights W_v, W_o; control: "
                      "another fact's reverse gradient.  Attention correlation: name -> description scores, forward vs "
                      "reverse document (MDM only); control: another fact's reverse document.")


def signature_figure(runs: dict[str, dict], out: str | Path) -> dict:
    """Reverse probability (control dashed), gradient cosine and attention correlation against the training step."""
    fig, ax = new_figure(ncols=3, width=4.6)
    for i, (name, r) in enumerate(runs.items()):
        tr = r["signatures"]
        steps = [s["step"] for s in tr]
        color = f"C{i % 10}"
        ax[0, 0].plot(steps, [s["reverse_p"] for s in tr], color=color, marker="o", label=name)
        ax[0, 0].plot(steps, [s["reverse_p_control"] for s in tr], color=color, ls="--")
        ax[0, 1].plot(steps, [s["grad_cosine"] for s in tr], color=color, marker="o", label=name)
        ax[0, 1].plot(steps, [s["grad_cosine_control"] for s in tr], color=color, ls="--")
        if tr[0].get("attn_corr") is not None:
            ax[0, 2].plot(steps, [s["attn_corr"] for s in tr], color=color, marker="o", label=name)
            ax[0, 2].plot(steps, [s["attn_corr_control"] for s in tr], color=color, ls="--")
    for a, title in zip(ax[0], ("reverse p (true; others dashed)", "storage gradient cosine (control dashed)",
                                "attention-score correlation (control dashed)")):
        a.set_title(title, fontsize=9)
        a.set_xlabel("step")
    ax[0, 0].legend(fontsize=7)
    return save_figure(fig, out, "signatures", "The three signatures over forward-only fine-tuning, per run; dashed: "
                                               "each signature's control.")


def summarize(dirs: list[str | Path], out: str | Path) -> dict:
    """Write ``out/summary.md`` and ``out/figures/signatures.png``; returns {"table", "figure"}."""
    runs = load_runs(dirs)
    table = summary_table(runs)
    Path(out).mkdir(parents=True, exist_ok=True)
    fig = signature_figure(runs, out)
    atomic_write_text(Path(out) / "summary.md", markdown_table(table) + f"\n\n![signatures]({fig['path']})\n")
    return {"table": table.to_dict(), "figure": fig}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="hf_finetune output folders")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        res = summarize(a.runs, a.out)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {Path(a.out) / 'summary.md'} and {Path(a.out) / res['figure']['path']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
