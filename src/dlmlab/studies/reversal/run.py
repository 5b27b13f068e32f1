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
from dlmlab.studies.reversal.presets import PRESETS, ReversalLadder, ReversalPreset
from dlmlab.studies.reversal.summary import pair_table, summarize, tables
from dlmlab.studies.reversal.synthetic import run_one
from dlmlab.studies.threads import threads_for, torch_threads

TITLE = "Reversal curse in masked diffusion vs autoregressive models (storage-routing)"


def run(preset: str, out: Path, progress: bool = True) -> StudyResult:
    """Run the study with the named preset; writes results.json, report.md and figures/ into ``out``."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} for the reversal study; choose from {sorted(PRESETS)}")
    cfg = PRESETS[preset]
    cfg.validate()
    if isinstance(cfg, ReversalLadder):
        from dlmlab.studies.reversal.ladder import run_ladder

        return run_ladder(cfg, preset, Path(out), progress)
    return run_preset(cfg, preset, Path(out), progress)


def _grid(cfg: ReversalPreset, progress: bool, workers: int, threads: int, desc: str) -> list[dict]:
    grid = [(cfg, kind, pe, seed, progress) for seed in cfg.seeds for kind in cfg.kinds for pe in cfg.positions]
    return map_jobs(run_one, grid, workers, desc=desc, progress=progress, threads=threads)


def pair_preset(cfg: ReversalPreset) -> ReversalPreset | None:
    """The grid on the study's fixed-layout pair task: the MDM kinds of ``cfg`` on ``cfg.pair_task`` (None: not run)."""
    if cfg.pair_task is None:
        return None
    return dataclasses.replace(cfg, task=cfg.pair_task, kinds=[k for k in cfg.kinds if k.startswith("mdm")],
                               model=cfg.pair_model or cfg.model, pair_task=None, pair_model=None, multilayer=None,
                               part="pair")


def one_layer_grid(cfg: ReversalPreset, progress: bool, workers: int) -> tuple[list[dict], list[dict]]:
    """(offset-task runs, pair-task runs) of the one-layer grid, both sets of jobs sharing the ``workers``."""
    pair = pair_preset(cfg)
    jobs = [(c, kind, pe, seed, progress) for c in ([cfg] + ([pair] if pair else []))
            for seed in c.seeds for kind in c.kinds for pe in c.positions]
    runs = map_jobs(run_one, jobs, workers, desc="reversal runs (one layer)", progress=progress,
                    threads=threads_for(cfg.model.d_model))
    return [r for r in runs if r["part"] != "pair"], [r for r in runs if r["part"] == "pair"]


def run_preset(cfg: ReversalPreset, name: str, out: Path, progress: bool = True) -> StudyResult:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    workers = default_workers(cfg.device)
    threads = threads_for(cfg.model.d_model)
    kinds, positions = list(cfg.kinds), list(cfg.positions)
    with torch_threads(threads):
        runs, pair_runs = one_layer_grid(cfg, progress, workers)
        summary = summarize(runs, kinds, positions, cfg.task.distances)
        chance = runs[0]["chance"]
        pair_summary = pair_chance = None
        if pair_runs:
            pair_summary = summarize(pair_runs, pair_preset(cfg).kinds, positions)
            pair_chance = pair_runs[0]["chance"]
        claims = make_claims(summary, positions, kinds, chance, pair_summary, pair_chance)
        tabs = tables(summary, kinds, positions, chance)
        if pair_summary is not None:
            tabs.insert(2, pair_table(pair_summary, positions))
        figs = figures.all_figures(runs, kinds, positions, cfg.task.distances, chance, out, GRAD_COS_LEVEL)
    results = {"summary": summary, "runs": runs, "chance": chance}
    if pair_runs:
        results["pair"] = {"summary": pair_summary, "runs": pair_runs, "chance": pair_chance}
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
        f"Reverse queries ('B r.. [M]' / 'B r..' -> A) are evaluated only. "
        + (f"The MDM is also trained on the study's fixed-layout pair task ('[M] r B' -> A at fixed positions, "
           f"{cfg.pair_task.n_pairs} facts, d_model={(cfg.pair_model or cfg.model).d_model}; Table 2b). "
           if cfg.pair_task is not None else "")
        + f"Intervals: 95% Student-t over the {len(cfg.seeds)} seeds (n beside each); paired differences pair runs "
          f"of the same seed (same facts, same layouts)."
    )
    res = StudyResult(study="reversal", preset=name, config=dataclasses.asdict(cfg), results=results, tables=tabs,
                      figures=figs, claims=claims, wall_time_s=time.time() - t0, setup=setup)
    write_study(out, res, TITLE)
    return res
