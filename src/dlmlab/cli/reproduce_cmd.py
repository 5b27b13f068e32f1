"""dlmlab reproduce STUDY --preset {smoke,cpu,paper} --out DIR"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlmlab.studies import STUDIES, load_study
from dlmlab.training.distributed import is_main_process


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", choices=[*STUDIES, "all"], help="which study to run")
    p.add_argument("--preset", default="cpu", choices=["smoke", "cpu", "paper"],
                   help="smoke: seconds, for CI; cpu: minutes on 2 cores; paper: the study's scale, for a GPU")
    p.add_argument("--out", required=True, help="output directory (results.json, report.md, figures/)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.study == "all":
        from dlmlab.studies.all import StudiesFailed, run_all

        try:
            path = run_all(args.preset, out, progress=not args.no_progress)
        except StudiesFailed as e:
            print(f"report: {e.report}")
            print(f"dlmlab reproduce: {e}", file=sys.stderr)
            return 1
        print(f"report: {path}")
        return 0
    study = load_study(args.study)
    study.run(args.preset, out, progress=not args.no_progress)
    if is_main_process():  # under torchrun every rank runs the study; rank 0 wrote the files
        print(f"results: {out / 'results.json'}\nreport: {out / 'report.md'}")
    return 0
