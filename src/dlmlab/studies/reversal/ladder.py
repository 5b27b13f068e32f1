"""The reversal study's scale ladder: the cpu recipe's one-layer grid (offset task and the study's fixed-layout
pair task) trained at several model widths, for the statistics only scale can settle.

``dlmlab reproduce reversal --preset ladder --out DIR``.  Every run is stored as it finishes under
``DIR/ladder_runs/`` (with its config), so a re-run with the same preset resumes: finished runs are read back,
only the missing ones train.  The statistics (:func:`ladder_stats`) are the claims' quantities per width, each
with its Student-t interval over seeds and the trend from the smallest to the largest width
(:mod:`dlmlab.report.ladder`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

from dlmlab.report import StudyResult, Table, write_study
from dlmlab.report.ladder import LadderStat, ladder_figure, ladder_table, trend
from dlmlab.studies.parallel import default_workers, map_jobs
from dlmlab.studies.reversal.claims import (ALIBI_CORR_STUDY, ATTN_CORR_LEVEL, GRAD_COS_LEVEL, GRAD_COS_STUDY,
                                            MECHANISM_PES)
from dlmlab.studies.reversal.presets import ReversalLadder, ReversalPreset
from dlmlab.studies.reversal.run import pair_preset
from dlmlab.studies.reversal.summary import ORDER, summarize, vals
from dlmlab.studies.reversal.synthetic import run_one
from dlmlab.studies.threads import threads_for, torch_threads

TITLE = "Reversal curse in masked diffusion vs autoregressive models: scale ladder"
RUNS_DIR = "ladder_runs"


def width_preset(cfg: ReversalLadder, width: int) -> ReversalPreset:
    """The ladder's base recipe with a one-layer model of width ``width`` (``base.model.n_heads`` heads)."""
    return dataclasses.replace(cfg.base, model=dataclasses.replace(cfg.base.model, d_model=width))


def _key(preset: ReversalPreset, kind: str, pe: str, seed: int) -> dict:
    return {"preset": dataclasses.asdict(preset), "kind": kind, "positions": pe, "seed": seed}


def cached_run(preset: ReversalPreset, kind: str, pe: str, seed: int, path: str, progress: bool = True) -> dict:
    """:func:`~dlmlab.studies.reversal.synthetic.run_one`, read back from ``path`` when a run with the same preset,
    kind, positions and seed finished there before; otherwise trained and written there (atomically)."""
    key = _key(preset, kind, pe, seed)
    p = Path(path)
    if p.exists():
        try:
            stored = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            stored = None
        if stored is not None and stored.get("key") == json.loads(json.dumps(key)):
            return stored["run"]
    run = run_one(preset, kind, pe, seed, progress)
    tmp = p.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"key": key, "run": run}))
    tmp.replace(p)
    return run


def ladder_jobs(cfg: ReversalLadder, out: Path, progress: bool) -> list[tuple]:
    """(preset, kind, pe, seed, path, progress) of every run of the ladder, pair-task runs included."""
    jobs = []
    for w in cfg.widths:
        base = width_preset(cfg, w)
        for c in [base] + ([pair_preset(base)] if base.pair_task is not None else []):
            for seed in c.seeds:
                for kind in c.kinds:
                    for pe in c.positions:
                        name = f"d{w}_{c.part}_{kind}_{pe}_s{seed}.json"
                        jobs.append((c, kind, pe, seed, str(out / RUNS_DIR / name), progress))
    return jobs


def _diff(summary: dict, a: tuple[str, str], b: tuple[str, str], key: str) -> list[float]:
    """Per-seed ``key`` of group a minus group b (seeds sorted the same way in both)."""
    return [x - y for x, y in zip(vals(summary, *a, key), vals(summary, *b, key))]


def ladder_stats(per_width: dict[int, dict], positions, kinds) -> tuple[list[LadderStat], list[LadderStat]]:
    """(transfer statistics, mechanism statistics) over the widths; ``per_width[w]`` = {"summary": ...,
    "pair_summary": ... or None} (as :func:`~dlmlab.studies.reversal.summary.summarize` returns them).

    Transfer: MDM - ARM final reverse accuracy per encoding (paired by seed), the PE ordering's paired differences
    of final reverse p on the offset task and on the fixed-layout pair task (the summary gives no number for
    these).  Mechanism: the MDM's storage-column gradient cosine once the forward facts are learned (the claim's
    quantity; level ``GRAD_COS_LEVEL``, study ``GRAD_COS_STUDY``) and the positional attention-score correlation
    (level ``ATTN_CORR_LEVEL``; study ``ALIBI_CORR_STUDY`` for ALiBi, none for RoPE) for RoPE and ALiBi: every
    row carries the study's value where the summary has one (issue 34)."""
    widths = sorted(per_width)
    S = lambda w: per_width[w]["summary"]  # noqa: E731
    transfer, mechanism = [], []
    if "arm" in kinds and "mdm" in kinds:
        for pe in positions:
            transfer.append(LadderStat(f"reverse acc MDM - ARM ({pe})",
                                       {w: _diff(S(w), ("mdm", pe), ("arm", pe), "rev_acc") for w in widths},
                                       size_label="d_model"))
    order = [pe for pe in ORDER if pe in positions]
    if "mdm" in kinds:
        for a, b in zip(order, order[1:]):
            transfer.append(LadderStat(f"reverse p {a} - {b} (offset task)",
                                       {w: _diff(S(w), ("mdm", a), ("mdm", b), "rev_p") for w in widths},
                                       size_label="d_model"))
            if all(per_width[w].get("pair_summary") for w in widths):
                transfer.append(LadderStat(
                    f"reverse p {a} - {b} (fixed layout)",
                    {w: _diff(per_width[w]["pair_summary"], ("mdm", a), ("mdm", b), "rev_p") for w in widths},
                    size_label="d_model"))
        for pe in (p for p in MECHANISM_PES if p in positions):
            mechanism.append(LadderStat(f"storage grad cos MDM, once learned ({pe})",
                                        {w: vals(S(w), "mdm", pe, "storage_grad_cos_learned") for w in widths},
                                        level=GRAD_COS_LEVEL, study_value=GRAD_COS_STUDY, size_label="d_model"))
            mechanism.append(LadderStat(f"positional attention corr MDM ({pe})",
                                        {w: vals(S(w), "mdm", pe, "positional_corr") for w in widths},
                                        level=ATTN_CORR_LEVEL, size_label="d_model",
                                        study_value=ALIBI_CORR_STUDY if pe == "alibi" else None))
    return transfer, mechanism


def cost_table(runs_by_width: dict[int, list[dict]], workers: int) -> Table:
    """CPU seconds per run by width and part, and the ladder's total (the budget check)."""
    rows, total = [], 0.0
    for w, runs in sorted(runs_by_width.items()):
        secs = [r["cpu_seconds"] for r in runs if "cpu_seconds" in r]
        total += sum(secs)
        by = lambda part: [r["cpu_seconds"] for r in runs if r.get("part") == part and "cpu_seconds" in r]  # noqa: E731
        mean = lambda xs: f"{np.mean(xs):.1f}" if xs else "-"  # noqa: E731
        params = next((r["params"] for r in runs if r["kind"] == "mdm" and r.get("part") != "pair"), None)
        rows.append([w, params, len(runs), mean(by("controlled")), mean(by("pair")), f"{sum(secs):.0f}"])
    return Table("Scale ladder: cost per width (CPU seconds, one torch thread per run)",
                 ["d_model", "parameters (MDM)", "runs", "s / offset-task run", "s / pair-task run", "s in all"], rows,
                 note=f"Each run's own process CPU time (time.process_time, so a shared machine's load does not "
                      f"count), as measured when it trained (a resumed run keeps its first measurement). All widths: "
                      f"{total:.0f} CPU s, about {total / max(workers, 1) / 60:.1f} minutes on {workers} idle cores.")


def run_ladder(cfg: ReversalLadder, name: str, out: Path, progress: bool = True) -> StudyResult:
    """Train (or read back) every run of the ladder, then write the ladder's tables, figures and results."""
    cfg.validate()
    out = Path(out)
    (out / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    workers = default_workers(cfg.base.device)
    threads = threads_for(min(cfg.widths))
    jobs = ladder_jobs(cfg, out, progress)
    with torch_threads(threads):
        runs = map_jobs(cached_run, jobs, workers, desc="reversal ladder runs", progress=progress, threads=threads)
    kinds, positions = list(cfg.base.kinds), list(cfg.base.positions)
    per_width, runs_by_width = {}, {}
    for w in cfg.widths:
        mine = [r for (c, *_), r in zip(jobs, runs) if c.model.d_model == w]
        runs_by_width[w] = mine
        offset = [r for r in mine if r["part"] != "pair"]
        pair = [r for r in mine if r["part"] == "pair"]
        per_width[w] = {"summary": summarize(offset, kinds, positions, cfg.base.task.distances),
                        "pair_summary": summarize(pair, [k for k in kinds if k.startswith("mdm")], positions)
                        if pair else None,
                        "params": next((r["params"] for r in offset if r["kind"] == "mdm"), None)}
    transfer, mechanism = ladder_stats(per_width, positions, kinds)
    tables = [ladder_table(transfer, "Scale ladder: reverse transfer (MDM vs ARM, PE ordering) by model width"),
              ladder_table(mechanism, "Scale ladder: storage-routing signatures of the MDM by model width"),
              cost_table(runs_by_width, workers)]
    figs = [ladder_figure(transfer, out, "ladder_transfer", "Reverse transfer over model width (mean and 95% "
                                                            "t-interval over seeds; dashed: 0)"),
            ladder_figure(mechanism, out, "ladder_mechanism", "Storage-gradient cosine on Y[:, B] and positional "
                                                              "attention correlation over model width (mean and 95% "
                                                              "t-interval over seeds; dashed: the claim's level; "
                                                              "dotted: the study's value)")]
    results = {"widths": list(cfg.widths), "per_width": {str(w): v for w, v in per_width.items()},
               "stats": [{"name": s.name, "values": {str(k): v for k, v in s.values.items()}, "level": s.level,
                          "study_value": s.study_value, "side": s.side, "trend": trend(s).as_dict(),
                          "per_size": {str(k): iv.as_dict() for k, iv in s.per_size.items()}}
                         for s in transfer + mechanism],
               "runs_dir": RUNS_DIR}
    b = cfg.base
    setup = (f"The cpu recipe's one-layer grid ({len(b.seeds)} seeds x {{{', '.join(kinds)}}} x positions "
             f"{{{', '.join(positions)}}}; {b.train.steps} AdamW steps, batch {b.train.batch_size}, lr {b.train.lr}; "
             f"offset task with {b.task.n_pairs} facts"
             + (" and the fixed-layout pair task (MDM)" if b.pair_task is not None else "")
             + f") at widths d_model in {list(cfg.widths)} ({b.model.n_heads} heads, one layer, attention only). "
               f"Each statistic: mean [95% Student-t interval] over seeds per width; trend: Welch interval of the "
               f"largest minus the smallest width's effect on the study's side. No claims are judged here.")
    res = StudyResult(study="reversal", preset=name, config=dataclasses.asdict(cfg), results=results, tables=tables,
                      figures=figs, claims=[], wall_time_s=time.time() - t0, setup=setup)
    write_study(out, res, TITLE)
    return res
