"""Orchestration of the state study: cells -> tables, figures, claims -> results.json / report.md."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

from dlmlab.config import ConfigError
from dlmlab.files import atomic_write_text
from dlmlab.report import StudyResult, Table, write_study
from dlmlab.studies.parallel import default_workers, map_jobs
from dlmlab.studies.state import figures
from dlmlab.studies.state.cells import build, eval_data, make_task, run_cell
from dlmlab.studies.state.claims import all_claims
from dlmlab.studies.state.presets import PRESETS, StatePreset
from dlmlab.studies.threads import threads_for, torch_threads
from dlmlab.training import TrainConfig
from dlmlab.training.distributed import is_main_process

ENV_PRETRAINED = "DLMLAB_STATE_PRETRAINED"


def availability(variants: list[str], p: StatePreset) -> tuple[list[str], dict[str, str]]:
    """Which model variants can be built here; the others map to the reason."""
    task = make_task("parity", p)
    ok, missing = [], {}
    for v in variants:
        try:
            build(v, task, p)
            ok.append(v)
        except (ImportError, ConfigError, TypeError) as e:
            missing[v] = f"{type(e).__name__}: {e}"
    return ok, missing


def _cell_json(c: dict) -> dict:
    return {k: v for k, v in c.items()}


def run(preset: str, out: Path, progress: bool = True) -> StudyResult:
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    p: StatePreset = dataclasses.replace(PRESETS[preset])
    env_paths = [s for s in os.environ.get(ENV_PRETRAINED, "").split(",") if s.strip()]
    if env_paths:
        p.pretrained_paths = env_paths
    p.validate()
    with torch_threads(threads_for(p.d_model)):
        return _run(p, preset, Path(out), progress)


def _run(p: StatePreset, preset: str, out: Path, progress: bool) -> StudyResult:
    from dlmlab.studies.state import TITLE

    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    variants = list(p.archs) + (["mamba-noconv"] if p.conv_ablation and "mamba" in p.archs else [])
    archs, missing = availability(variants, p)
    keys = [(a, t) for t in p.tasks for a in archs]
    cells: dict = {k: c for k in keys if (c := load_cell(out, k, p)) is not None}
    todo = [k for k in keys if k not in cells]
    tasks = {t: make_task(t, p) for t in dict.fromkeys(t for _, t in todo)}
    data = {t: eval_data(task, p) for t, task in tasks.items()}
    jobs = [(a, tasks[t], data[t], p, progress, out) for a, t in todo]
    threads = threads_for(p.d_model)
    for k, cell in zip(todo, map_jobs(_cell_job, jobs, default_workers(), desc=f"state ({preset})",
                                       progress=progress, threads=threads)):
        cells[k] = cell
    cells = {k: cells[k] for k in keys}  # table order: task-major, whatever finished first

    pretrained = []
    if p.pretrained_paths:
        from dlmlab.studies.state.pretrained import run_pretrained

        for path in p.pretrained_paths:
            pretrained.append(run_pretrained(path, p.pretrained_task, p, progress=progress))

    main_archs = [a for a in archs if a != "mamba-noconv"]
    figs = [figures.probe_by_layer(cells, p.tasks, main_archs, out),
            figures.ablation_drops(cells, p.tasks, main_archs, p.train_len, out),
            figures.ood_lengths(cells, p.tasks, archs, p.train_len, out)]
    pf = figures.patching(cells, p.tasks, main_archs, out)
    if pf:
        figs.append(pf)

    res = StudyResult(
        study="state", preset=preset, config=dataclasses.asdict(p),
        results={"cells": [_cell_json(c) for c in cells.values()], "unavailable": missing,
                 "pretrained": pretrained},
        tables=tables(cells, p, archs, main_archs, missing, pretrained), figures=figs, claims=all_claims(cells),
        setup=setup_text(p, archs, missing, cells),
    )
    res.wall_time_s = time.perf_counter() - t_start
    write_study(out, res, TITLE)
    return res


def _cell_path(out: Path, key: tuple[str, str]) -> Path:
    return out / "cells" / f"{key[0]}__{key[1]}.json"


def _cell_job(variant: str, task, data, p: StatePreset, progress: bool, out: Path) -> dict:
    """One job (possibly on a worker process): train and analyse one cell, then save it for resuming."""
    cell = run_cell(variant, task, data, p, progress=progress, analyse=(variant != "mamba-noconv"))
    if is_main_process():
        path = _cell_path(out, (variant, task.name))
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"preset": dataclasses.asdict(p), "cell": cell}, default=_plain))
    return cell


def _plain(x):
    if hasattr(x, "tolist"):  # numpy / torch scalars and arrays
        return x.tolist()
    raise TypeError(f"cannot save {type(x).__name__} in a state-study cell")


def load_cell(out: Path, key: tuple[str, str], p: StatePreset) -> dict | None:
    """A cell finished by an earlier run of the same preset (``out/cells/<arch>__<task>.json``), else None."""
    path = _cell_path(out, key)
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None  # a torn write: recompute the cell
    if saved.get("preset") != json.loads(json.dumps(dataclasses.asdict(p))):
        return None
    cell = saved["cell"]
    # JSON turned the evaluation lengths (dict keys) into strings
    cell["acc_by_len"] = {int(k): v for k, v in cell["acc_by_len"].items()}
    if "ablation" in cell:
        cell["ablation"] = {kind: {int(k): v for k, v in by_len.items()} for kind, by_len in cell["ablation"].items()}
    return cell


def setup_text(p: StatePreset, archs, missing, cells) -> str:
    lrs = ", ".join(f"{a} {p.lr_for(a):g}" for a in archs)
    steps = "; ".join(f"{a}: " + ", ".join(f"{t} {p.steps_for(t, a)}" for t in p.tasks) for a in archs)
    s = (f"Each architecture ({', '.join(archs)}) is trained with AdamW (batch {p.batch_size}, warmup "
         f"{p.warmup_steps}, {TrainConfig.schedule} decay, grad clip {TrainConfig.grad_clip}; lr per architecture: {lrs}) to tag every "
         f"position of {', '.join(p.tasks)} at length {p.train_len} (steps per architecture and task: {steps}), "
         f"d_model {p.d_model}, {p.n_layers} layers; "
         "non-transformer widths matched to the transformer's parameter count by the model factory. "
         f"Evaluation at lengths {p.eval_lens} ({p.eval_seqs} held-out sequences each; Code-Depth uses held-out "
         "standard-library files). Probes: logistic regression on "
         f"{p.probe_samples} positions of {p.probe_seqs} sequences per layer, split by sequence, "
         "control = shuffled labels. Best layer = earliest layer within 0.005 of the best probe accuracy. "
         f"A cell is 'learned' when its per-token accuracy at length {p.train_len} is >= {p.learned_acc}; "
         "probe, ablation and patching profiles of cells that did not learn the task are reported but say little "
         "about how the task is solved, and the claims about them count learned cells only.")
    nl = [f"{a}/{t}" for (a, t), c in cells.items() if not c.get("learned")]
    if nl:
        s += f" Not learned: {', '.join(nl)}."
    if missing:
        s += " NOT RUN (unavailable in this build): " + "; ".join(f"{k} ({v})" for k, v in missing.items()) + "."
    if not p.pretrained_paths:
        s += (f" Pretrained-scale part skipped: no local checkpoint given (preset pretrained_paths or env "
              f"{ENV_PRETRAINED}).")
    return s


def tables(cells, p: StatePreset, archs, main_archs, missing, pretrained) -> list[Table]:
    ts = []
    rows = []
    for a in archs:
        rows.append([a] + [cells[(a, t)]["params"] if (a, t) in cells else None for t in p.tasks])
    ts.append(Table("Parameter counts", ["arch"] + list(p.tasks), rows,
                    note="Counts differ by task only through the vocabulary / output sizes."))
    if (p.d_model, p.n_layers) != (128, 4):
        ts.append(paper_param_table(p, main_archs))
    rows = [[a, t, "yes" if c["learned"] else "NO"] + [c["acc_by_len"][L] for L in p.eval_lens]
            + [c["steps"], c["lr"], c["train_time_s"]] for (a, t), c in cells.items()]
    ts.append(Table("Per-token accuracy by evaluation length", ["arch", "task", "learned"]
                    + [f"L={L}" for L in p.eval_lens] + ["steps", "lr", "train s"], rows,
                    note=f"Trained at length {p.train_len}; learned = accuracy at length {p.train_len} >= "
                         f"{p.learned_acc}."))
    L1 = p.n_layers + 1
    rows = []
    for (a, t), c in cells.items():
        if "probes" in c:
            rows.append([a, t, "yes" if c["learned"] else "NO"] + [pr["accuracy"] for pr in c["probes"]] + [
                float(np.mean([pr["control_accuracy"] for pr in c["probes"]])), c["best_layer"]])
    ts.append(Table("Probe accuracy by layer", ["arch", "task", "learned"] + [f"layer {i}" for i in range(L1)]
                    + ["control (mean)", "best layer"], rows,
                    note="Layer 0 = embedding; layer i = after block i. Rows with learned = NO come from models "
                         "that did not learn the task."))
    rows = []
    for (a, t), c in cells.items():
        for kind, by_len in c.get("ablation", {}).items():
            rows.append([a, t, kind] + [by_len[L]["drop"] for L in p.eval_lens])
    ts.append(Table("Accuracy drop from projecting out directions at the best probe layer",
                    ["arch", "task", "directions"] + [f"L={L}" for L in p.eval_lens], rows,
                    note="probe_dir: the probe's top-class direction; probe_subspace: all class rows; pca / "
                         "random_subspace: as many top-PCA / random directions as the probe subspace's rank."))
    rows = [[a, t] + c["layer_ablation_drop"] for (a, t), c in cells.items() if "layer_ablation_drop" in c]
    ts.append(Table("Accuracy drop from projecting out each layer's probe subspace (train length)",
                    ["arch", "task"] + [f"layer {i}" for i in range(L1)], rows))
    rows = []
    for (a, t), c in cells.items():
        if "patching" in c:
            pa = c["patching"]
            rows.append([a, t, "corrupted pos"] + pa["at_corrupt_pos"])
            rows.append([a, t, "last pos"] + pa["at_last_pos"])
    if rows:
        ts.append(Table("Activation patching clean -> corrupted: fraction of final logit gap recovered",
                        ["arch", "task", "patched at"] + [f"layer {i}" for i in range(L1)], rows,
                        note=f"One token changed at position {p.train_len // 2}; target = last position."))
    if "mamba-noconv" in archs:
        rows = []
        for t in p.tasks:
            if ("mamba", t) in cells and ("mamba-noconv", t) in cells:
                m = [cells[("mamba", t)]["acc_by_len"][L] for L in p.eval_lens]
                n = [cells[("mamba-noconv", t)]["acc_by_len"][L] for L in p.eval_lens]
                rows.append([t, float(np.mean(m)), float(np.mean(n)), float(np.mean(m) - np.mean(n))])
        ts.append(Table("Mamba Conv1D ablation (mean accuracy over lengths)",
                        ["task", "with conv", "without conv", "drop"], rows))
    if missing:
        ts.append(Table("Not run", ["variant", "reason"], [[k, v] for k, v in missing.items()]))
    if pretrained:
        ts.append(Table("Pretrained checkpoints fine-tuned on a task",
                        ["checkpoint", "task", "params", "acc (train len)", "best layer", "probe acc by layer",
                         "probe_dir drop"],
                        [[r["path"], r["task"], r["params"], r["acc_by_len"].get(p.train_len), r["best_layer"],
                          ", ".join(f"{x:.2f}" for x in r["probe_accuracy"]), r["probe_dir_drop"]]
                         for r in pretrained]))
    return ts


def paper_param_table(p: StatePreset, archs) -> Table:
    """Parameter counts at the paper shape (d_model 128, 4 layers), counted on the meta device."""
    from dlmlab.models.factory import param_table

    cols = {}
    for t in p.tasks:
        task = make_task(t, p)
        for row in param_table(task.vocab_size, task.n_classes, 128, 4, tuple(archs)):
            cols.setdefault(row["arch"], {})[t] = row["params"]
    return Table("Parameter counts at the paper size (d_model 128, 4 layers; not trained in this preset)",
                 ["arch"] + list(p.tasks), [[a] + [cols.get(a, {}).get(t) for t in p.tasks] for a in archs])
