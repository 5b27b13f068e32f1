"""Orchestrate the reversal study: train every (kind x PE x seed), aggregate with intervals over seeds, compute
the claims (claims.py), write tables, figures and results."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from dlmlab.report import StudyResult, write_study
from dlmlab.studies.parallel import default_workers, map_jobs
from dlmlab.studies.reversal import figures
from dlmlab.studies.reversal.claims import GRAD_COS_LEVEL, make_claims
from dlmlab.studies.reversal.presets import PRESETS, ReversalPreset
from dlmlab.studies.reversal.summary import summarize, tables
from dlmlab.studies.reversal.synthetic import run_one
from dlmlab.studies.threads import threads_for, torch_threads

TITLE = "Reversal curse in masked diffusion vs autoregressive models (storage-routing)"


def run(preset: str, out: Path, progress: bool = True) -> StudyResult:
    """Run the study with the named preset; writes results.json, report.md and figures/ into ``out``."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} for the reversal study; choose from {sorted(PRESETS)}")
    cfg: ReversalPreset = PRESETS[preset]
    cfg.validate()
    return run_preset(cfg, preset, Path(out), progress)


def _grid(cfg: ReversalPreset, progress: bool, workers: int, threads: int, desc: str) -> list[dict]:
    grid = [(cfg, kind, pe, seed, progress) for seed in cfg.seeds for kind in cfg.kinds for pe in cfg.positions]
    return map_jobs(run_one, grid, workers, desc=desc, progress=progress, threads=threads)


def run_preset(cfg: ReversalPreset, name: str, out: Path, progress: bool = True) -> StudyResult:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    workers = default_workers(cfg.device)
    threads = threads_for(cfg.model.d_model)
    kinds, positions = list(cfg.kinds), list(cfg.positions)
    with torch_threads(threads):
        runs = _grid(cfg, progress, workers, threads, "reversal runs (one layer)")
        summary = summarize(runs, kinds, positions, cfg.task.distances)
        chance = runs[0]["chance"]
        claims = make_claims(summary, positions, kinds, chance)
        tabs = tables(summary, kinds, positions, chance)
        figs = figures.all_figures(runs, kinds, positions, cfg.task.distances, chance, out, GRAD_COS_LEVEL)
    results = {"summary": summary, "runs": runs, "chance": chance}
    if cfg.multilayer is not None:  # the separate, named multi-layer part: same grid, deeper model, no claims
        deep = dataclasses.replace(cfg, model=cfg.multilayer, multilayer=None, part="multilayer")
        with torch_threads(threads_for(deep.model.d_model)):
            mruns = _grid(deep, progress, workers, threads_for(deep.model.d_model), "reversal runs (multi-layer)")
        msum = summarize(mruns, kinds, positions, cfg.task.distances)
        results["multilayer"] = {"summary": msum, "runs": mruns}
        tabs += tables(msum, kinds, positions, chance, part=f"multi-layer part ({deep.model.n_layers} layers)")[:1]
    if cfg.real.enabled:
        from dlmlab.studies.reversal.real import real_claim, real_table, run_real

        with torch_threads(threads_for(cfg.real.model.d_model)):
            real = run_real(cfg.real, cfg.seeds, progress, cfg.device, workers=workers)
        results["real"] = real
        tabs.append(real_table(real))
        claims.append(real_claim(real))
    t = cfg.task
    setup = (
        f"{len(cfg.seeds)} seeds x {{{', '.join(kinds)}}} x positions {{{', '.join(positions)}}}: one-layer "
        f"transformer (d_model={cfg.model.d_model}, heads={cfg.model.n_heads}, d_mlp={cfg.model.d_mlp}, "
        f"norm={cfg.model.norm}), MDM bidirectional with absorbing mask, ARM causal, identical otherwise. Task: "
        f"{t.n_pairs} facts A -> B placed at random offsets of {t.seq_len}-token sequences, A-B distance in "
        f"{t.distances} (relation tokens between), {t.n_distractors} distractor entities ({t.distractors}) farther "
        f"than the A-B distance from the fact. Forward-only training: MDM on '[M] r.. B' -> A (given mask); ARM "
        f"on 'A r..' -> B; {cfg.train.steps} AdamW steps, batch {cfg.train.batch_size}, lr {cfg.train.lr}. "
        f"Reverse queries ('B r.. [M]' / 'B r..' -> A) are evaluated only. Intervals: 95% percentile bootstrap "
        f"over seeds; paired differences pair runs of the same seed (same facts, same layouts)."
    )
    res = StudyResult(study="reversal", preset=name, config=dataclasses.asdict(cfg), results=results, tables=tabs,
                      figures=figs, claims=claims, wall_time_s=time.time() - t0, setup=setup)
    write_study(out, res, TITLE)
    return res
