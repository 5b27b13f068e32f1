"""dlmlab reproduce STUDY --preset {smoke,cpu,paper,ladder} --out DIR

One study writes DIR/results.json, DIR/report.md, DIR/figures/ and DIR/report.html (the page ``reproduce all``
writes, with this study alone); ``all`` writes DIR/<study>/ per study and one DIR/report.html."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from dlmlab import outdir, studies
from dlmlab.studies.parallel import ENV_WORKERS
from dlmlab.training.distributed import is_main_process


def add_arguments(p: argparse.ArgumentParser) -> None:
    # studies.STUDIES read now, not bound at import (tests replace it with fakes)
    p.add_argument("study", choices=[*studies.STUDIES, "all"], help="which study to run")
    p.add_argument("--preset", default="cpu", choices=["smoke", "cpu", "paper", "ladder"],
                   help="smoke: seconds, for CI; cpu: minutes on 2 cores; paper: the study's scale, for a GPU; "
                        "ladder: one study's scale statistics at 3-4 model sizes (not for all)")
    p.add_argument("--out", required=True,
                   help="output directory (results.json, report.md, figures/); one run at a time per directory")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument("--workers", type=_positive_int, default=None,
                   help=f"processes that train a study's independent small models side by side (default: "
                        f"${ENV_WORKERS}, else one per CPU core; 1 under torchrun and on a GPU)")


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {n}")
    return n


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    with outdir.locked(out, f"dlmlab reproduce {args.study}"), outdir.write_errors(out):
        return _run(args, out)


def _run(args: argparse.Namespace, out: Path) -> int:
    if args.workers is not None:
        os.environ[ENV_WORKERS] = str(args.workers)  # read by every study (dlmlab.studies.parallel)
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
    study = studies.load_study(args.study)
    started = time.time()
    study.run(args.preset, out, progress=not args.no_progress)
    if is_main_process():  # under torchrun every rank runs the study; rank 0 wrote the files
        page = _write_html(args.study, study, args.preset, out, time.time() - started)
        print(f"html report: {page}")
        print(_claims_line(out))
        print(f"results: {out / 'results.json'}\nreport: {out / 'report.md'}")
    return 0


def _write_html(name: str, study, preset: str, out: Path, wall_time_s: float) -> Path:
    """``out/report.html`` for one study: the page ``reproduce all`` writes, with this study alone."""
    from dlmlab.report.claims import claim_tally
    from dlmlab.report.html import write_report
    from dlmlab.report.results import load_results
    from dlmlab.studies.all import full_environment

    claims = load_results(out).get("claims") or []
    meta = {"name": name, "title": getattr(study, "TITLE", name), "status": "ran", "wall_time_s": wall_time_s,
            **claim_tally(claims)}
    manifest = {"preset": preset, "updated": time.time(), "studies": {name: meta}, "environment": full_environment()}
    return write_report(out, manifest, title=f"dlmlab: {meta['title']}", dirs={name: out})


def _claims_line(out: Path) -> str:
    """``claims: 6: 4 reproduced, 1 contradicted, 1 inconclusive (1 underpowered)`` from ``out/results.json``."""
    from dlmlab.report.claims import claim_tally, verdict_summary
    from dlmlab.report.results import load_results

    t = claim_tally(load_results(out).get("claims") or [])
    line = f"claims: {t['claims_total']}: {verdict_summary(t['claims_verdicts'])}"
    if t["extensions_total"]:
        line += f"; extensions (not tallied): {t['extensions_total']}: {verdict_summary(t['extensions_verdicts'])}"
    return line
