"""Mask-rate-range sweep: does induction emerge in a DLM trained on mask rates t ~ U[t_min, t_max]?

    python -m dlmlab.studies.induction.sweep --preset cpu --depth 2 --ranges 0.001:1 0.02:0.5

trains one masked-diffusion model of the study's recipe per range (everything else from the preset)
and prints a markdown table of forward / reverse induction accuracy (both-sides context); ``--json``
also writes the rows.  This is the experiment behind the ``cpu`` preset's range: the table is computed
by the run, nothing is copied into the docs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from dlmlab.analysis.induction import dlm_accuracy
from dlmlab.config import ConfigError
from dlmlab.report.results import Table, markdown_table
from dlmlab.studies.induction.presets import PRESETS
from dlmlab.studies.induction.train import load_data, train_model
from dlmlab.studies.threads import torch_threads
from dlmlab.tasks.repeated import repeated_tokens


def parse_range(text: str) -> tuple[float, float]:
    """'0.02:0.5' -> (0.02, 0.5)."""
    try:
        lo, hi = (float(x) for x in text.split(":"))
    except ValueError:
        raise ConfigError(f"a range is 'T_MIN:T_MAX' (e.g. 0.02:0.5), got {text!r}") from None
    return lo, hi


def sweep(preset: str, depth: int, ranges: list[tuple[float, float]], steps: int | None = None,
          seed: int | None = None, progress: bool = True) -> list[dict]:
    """One DLM per range -> rows {t_min, t_max, forward, reverse, seconds}."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    base = PRESETS[preset]
    overrides = {k: v for k, v in (("steps", steps), ("seed", seed)) if v is not None}
    rows = []
    for lo, hi in ranges:
        p = dataclasses.replace(base, t_min=lo, t_max=hi, depths=[depth], **overrides)
        p.validate()
        with torch_threads(p.threads):
            data = load_data(p)
            eval_tokens = repeated_tokens(p.eval_seqs, p.seq_len // 2, data.lo, data.hi,
                                          torch.Generator().manual_seed(p.seed + 1), distinct=True)
            t0 = time.time()
            model, _ = train_model(p, data, depth, "dlm", None, progress)
            secs = time.time() - t0
            acc = {d: dlm_accuracy(model.eval(), eval_tokens, data.vocab.mask_id, d, "both", p.per_seq, seed=p.seed)
                   for d in ("forward", "reverse")}
        rows.append({"t_min": lo, "t_max": hi, "steps": p.steps, "seed": p.seed, **acc, "seconds": secs})
    return rows


def table(rows: list[dict], depth: int) -> Table:
    return Table(f"DLM L{depth}: induction accuracy (both-sides context) by training mask-rate range",
                 ["t range", "steps", "seed", "forward", "reverse", "train s"],
                 [[f"[{r['t_min']}, {r['t_max']}]", r["steps"], r["seed"], r["forward"], r["reverse"], r["seconds"]]
                  for r in rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlmlab.studies.induction.sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--ranges", nargs="+", default=["0.001:1", "0.02:0.5"], help="T_MIN:T_MAX per model")
    ap.add_argument("--steps", type=int, default=None, help="override the preset's steps")
    ap.add_argument("--seed", type=int, default=None, help="override the preset's seed")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        rows = sweep(args.preset, args.depth, [parse_range(r) for r in args.ranges], args.steps, args.seed,
                     progress=not args.no_progress)
    except ConfigError as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2
    print(markdown_table(table(rows, args.depth)))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
