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
from dlmlab.studies.state.claims import all_claims, int_lengths, largest_jump_layer
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


# Relative CPU cost of one training sequence of length 40 per variant (measured, one thread, d_model 128;
# Mamba-2 with the fused SSD kernel, 3.5x faster than the chunked scan's 9.0 on the parity cell):
# only orders the jobs, longest first, so two workers finish together; results do not depend on it.
SEQ_COST = {"transformer": 2.6, "mamba": 5.2, "mamba-noconv": 5.1, "mamba2": 2.6, "lstm": 1.9, "gru": 3.0}

Key = tuple  # (variant, task, seed); seed 0 of a main architecture is its analysed cell


def run(preset: str, out: Path, progress: bool = True) -> StudyResult:
    from dlmlab.studies.state.ladder import LADDERS, run_ladder

    if preset in LADDERS:  # the scale ladder: its own command, not part of `reproduce all`
        return run_ladder(preset, Path(out), progress)
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose from {sorted(PRESETS) + sorted(LADDERS)}")
    p: StatePreset = dataclasses.replace(PRESETS[preset])
    env_paths = [s for s in os.environ.get(ENV_PRETRAINED, "").split(",") if s.strip()]
    if env_paths:
        p.pretrained_paths = env_paths
    p.validate()
    with torch_threads(threads_for(p.d_model)):
        return _run(p, preset, Path(out), progress)


def job_keys(p: StatePreset, archs: list[str]) -> list[Key]:
    """Every training run of the study: each main architecture on each task (seed 0, analysed), then Mamba
    with (seeds 1...) and without Conv1D (seeds 0...) on the Conv1D tasks."""
    main = [a for a in archs if a != "mamba-noconv"]
    keys = [(a, t, 0) for t in p.tasks for a in main]
    if "mamba" in archs and "mamba-noconv" in archs:
        for t in [t for t in p.conv_tasks if t in p.tasks]:
            keys += [("mamba", t, s) for s in range(1, p.conv_seeds)]
            keys += [("mamba-noconv", t, s) for s in range(p.conv_seeds)]
    keys += [k for k in _profile_keys(p, main) if k not in keys]
    return [k for k in keys if not p.skipped(k[0], k[1])]  # not_run (budget): never trained


def _profile_keys(p: StatePreset, main: list[str]) -> list[Key]:
    """The further seeds (1 ... profile_seeds - 1) of the profile claims' cells."""
    return [(a, t, s) for t in p.profile_tasks if t in p.tasks for a in p.profile_archs if a in main
            for s in range(1, p.profile_seeds)]


def analysis_for(key: Key, p: StatePreset) -> bool | str:
    """What a run is analysed for: a main cell (seed 0) fully, a further seed of a profile claim's cell by its
    probes (also when it is one of Mamba's Conv1D seeds), other runs not at all."""
    v, t, s = key
    if v == "mamba-noconv":
        return False
    if s == 0:
        return True
    return "probes" if (v in p.profile_archs and t in p.profile_tasks and s < p.profile_seeds) else False


def _cost(key: Key, p: StatePreset) -> float:
    v, t, s = key
    analysed = {True: 1.3, "probes": 1.05, False: 1.0}[analysis_for(key, p)]
    return SEQ_COST.get(v, 5.0) * p.steps_for(t, v) * p.batch_size * analysed


def _run(p: StatePreset, preset: str, out: Path, progress: bool) -> StudyResult:
    from dlmlab.studies.state import TITLE

    out.mkdir(parents=True, exist_ok=True)
    t_start, cpu_start = time.perf_counter(), time.process_time()

    variants = list(p.archs) + (["mamba-noconv"] if p.conv_ablation and "mamba" in p.archs else [])
    archs, missing = availability(variants, p)
    keys = job_keys(p, archs)
    runs: dict = {k: c for k in keys if (c := load_cell(out, k, p)) is not None}
    todo = sorted((k for k in keys if k not in runs), key=lambda k: -_cost(k, p))  # longest first
    tasks = {t: make_task(t, p) for t in dict.fromkeys(t for _, t, _ in todo)}
    data = {t: eval_data(task, p) for t, task in tasks.items()}
    jobs = [(k, tasks[k[1]], data[k[1]], p, progress, out) for k in todo]
    threads = threads_for(p.d_model)
    for k, cell in zip(todo, map_jobs(_cell_job, jobs, default_workers(), desc=f"state ({preset})",
                                       progress=progress, threads=threads)):
        runs[k] = cell
    main_archs = [a for a in archs if a != "mamba-noconv"]
    cells = {(a, t): runs[(a, t, 0)] for t in p.tasks for a in main_archs if (a, t, 0) in runs}  # task-major
    conv_runs = {k: runs[k] for k in keys if k[0] in ("mamba", "mamba-noconv") and k[1] in p.conv_tasks}
    seed_cells = {(a, t): [runs[(a, t, s)] for s in range(1, p.profile_seeds)]
                  for a, t, s0 in _profile_keys(p, main_archs) if s0 == 1 and not p.skipped(a, t)}
    skipped = {f"{a}/{t}": "budget" for t in p.tasks for a in main_archs if p.skipped(a, t)}

    pretrained, pretrained_note = run_pretrained_part(p, out, progress)

    figs = [figures.probe_by_layer(cells, p.tasks, main_archs, out),
            figures.ablation_drops(cells, p.tasks, main_archs, p.train_len, out),
            figures.ood_lengths(cells, conv_runs, p.tasks, archs, p.train_len, out),
            figures.training_curves(cells, p.tasks, main_archs, out)]
    for fig in (figures.patching(cells, p.tasks, main_archs, out),
                figures.patching_grid(cells, p.tasks, main_archs, out)):
        if fig:
            figs.append(fig)

    res = StudyResult(
        study="state", preset=preset, config=dataclasses.asdict(p),
        results={"cells": list(cells.values()),
                 "conv_runs": [c for k, c in conv_runs.items() if k[2] != 0 or k[0] != "mamba"],
                 "seed_runs": [c for k, c in runs.items() if k[2] > 0 and k not in conv_runs],
                 "unavailable": missing, "not_run_budget": sorted(skipped),
                 "pretrained": pretrained, "pretrained_note": pretrained_note,
                 "jobs_cpu_s": float(sum(c.get("cpu_time_s", 0.0) for c in runs.values()))},
        tables=tables(cells, conv_runs, p, archs, main_archs, missing, pretrained, seed_cells), figures=figs,
        claims=all_claims(cells, conv_runs, pretrained, seed_cells, skipped=skipped),
        setup=setup_text(p, archs, missing, cells, pretrained_note),
    )
    res.wall_time_s = time.perf_counter() - t_start
    # this process's CPU seconds (with one worker it includes the jobs'): estimates the run time on an idle machine
    res.results["main_cpu_s"] = time.process_time() - cpu_start
    write_study(out, res, TITLE)
    return res


def run_pretrained_part(p: StatePreset, out: Path, progress: bool) -> tuple[list[dict], str]:
    """The pretrained-scale part: local checkpoints (``pretrained_paths``), else small models pretrained here
    (``pretrain_small``), else skipped; -> (one result per checkpoint, a note saying which)."""
    paths = list(p.pretrained_paths)
    note = f"local checkpoints {paths}" if paths else ""
    if not paths and p.pretrain_small:
        from dlmlab.studies.state.pretrain_small import pretrain_small_models

        paths = pretrain_small_models(p, out / "pretrained", progress=progress)
        note = f"small models pretrained here (recipe {p.pretrain_small!r})"
    if not paths:
        return [], (f"Pretrained-scale part skipped: no local checkpoint given (preset pretrained_paths or env "
                    f"{ENV_PRETRAINED}) and pretrain_small off.")
    from dlmlab.studies.state.pretrained import run_pretrained

    results = [run_pretrained(path, p.pretrained_task, p, progress=progress) for path in paths]
    for r in results:  # folders written here are named relative to the output folder (same on every machine)
        if Path(r["path"]).resolve().is_relative_to(out.resolve()):
            r["path"] = str(Path(r["path"]).resolve().relative_to(out.resolve()))
    return results, note


def _cell_path(out: Path, key: Key) -> Path:
    v, t, s = key
    return out / "cells" / (f"{v}__{t}.json" if s == 0 else f"{v}__{t}__s{s}.json")


def seeded(p: StatePreset, seed: int) -> StatePreset:
    """The preset for training seed ``seed`` (offset from ``p.seed``; evaluation data stay those of ``p``)."""
    return p if seed == 0 else dataclasses.replace(p, seed=p.seed + seed)


# preset fields of the pretrained-scale part only: a saved cell stays valid when they change
_PRETRAINED_FIELDS = ("pretrain_small", "pretrained_paths", "pretrained_task", "pretrained_steps")


def _cell_config(p: StatePreset) -> dict:
    """The preset as saved with each cell (JSON types), without the pretrained-part fields."""
    return {k: v for k, v in json.loads(json.dumps(dataclasses.asdict(p))).items() if k not in _PRETRAINED_FIELDS}


def _cell_job(key: Key, task, data, p: StatePreset, progress: bool, out: Path, analyse: bool | str | None = None) -> dict:
    """One job (possibly on a worker process): train (and for a main cell analyse) one run, then save it.
    ``analyse`` None: a main cell (seed 0) is analysed fully, other runs not.  Runs of the Conv1D comparison
    train their full steps (no stop once learned), so both arms get the same budget."""
    v, t, s = key
    cpu0 = time.process_time()
    if analyse is None:
        analyse = analysis_for(key, p)
    conv = p.conv_ablation and v in ("mamba", "mamba-noconv") and t in p.conv_tasks
    profile = p.profile_fixed_cap and v in p.profile_archs and t in p.profile_tasks and s < p.profile_seeds
    cell = run_cell(v, task, data, seeded(p, s), progress=progress, analyse=analyse,
                    until_learned=False if conv or profile else None)
    cell["cpu_time_s"] = time.process_time() - cpu0  # this job's CPU seconds (one thread): for budgeting
    if is_main_process():
        path = _cell_path(out, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"preset": _cell_config(p), "seed": s, "cell": cell}, default=_plain))
    return cell


def _plain(x):
    if hasattr(x, "tolist"):  # numpy / torch scalars and arrays
        return x.tolist()
    raise TypeError(f"cannot save {type(x).__name__} in a state-study cell")


def load_cell(out: Path, key: Key, p: StatePreset) -> dict | None:
    """A run finished by an earlier run of the same preset (``out/cells/...json``), else None."""
    path = _cell_path(out, key)
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None  # a torn write: recompute the cell
    if saved.get("preset") != _cell_config(p) or saved.get("seed") != key[2]:
        return None
    return int_lengths(saved["cell"])


def status(c: dict) -> str:
    """'learned' (>= its learned level), 'partial' (above chance + chance_margin, not learned) or 'at chance'."""
    return "learned" if c.get("learned") else "partial" if c.get("above_chance") else "at chance"


def setup_text(p: StatePreset, archs, missing, cells, pretrained_note: str = "") -> str:
    lrs = ", ".join(f"{a} {p.lr_for(a):g}" for a in archs)
    steps = "; ".join(f"{a}: " + ", ".join(f"{t} {'not run' if p.skipped(a, t) else p.steps_for(t, a)}"
                                           for t in p.tasks) for a in archs)
    s = (f"Each architecture ({', '.join(archs)}) is trained with AdamW (batch {p.batch_size}, warmup "
         f"{p.warmup_steps}, {TrainConfig.schedule} decay, grad clip {TrainConfig.grad_clip}, weight decay on "
         f"matrices only, never on A_log / D / dt_bias; lr per architecture: {lrs}) to tag every "
         f"position of {', '.join(p.tasks)} at length {p.train_len} (steps per architecture and task: {steps}), "
         f"d_model {p.d_model}, {p.n_layers} layers; "
         "non-transformer widths matched to the transformer's parameter count by the model factory. "
         f"Evaluation at lengths {p.eval_lens} ({p.eval_seqs} held-out sequences each; Code-Depth uses held-out "
         "standard-library files). Probes: logistic regression on "
         f"{p.probe_samples} positions of {p.probe_seqs} sequences per layer, split by sequence, "
         "control = shuffled labels. Best block = earliest block within 0.005 of the best block probe accuracy. "
         f"Chance = the majority-label rate of the evaluation labels; a cell is 'above chance' when its per-token "
         f"accuracy at length {p.train_len} is >= chance + {p.chance_margin}, 'learned' when >= chance + "
         f"{p.learned_fraction} x (1 - chance) ({p.learned_fraction:.0%} of the way from chance to perfect), "
         "'partial' in between. Claims count learned cells only (their precondition, checked for every cell a claim "
         "names, also when it holds); partial cells and cells at chance are reported but not counted. "
         + (f"Each run stops once its accuracy on a fixed check batch of the training split reaches "
            f"{p.stop_fraction:.0%} of the way from chance to perfect (checked ten times over its steps, which are a "
            "cap). " if p.until_learned else "") + "Ablations use "
         f"{p.ablation_seqs or p.eval_seqs} sequences per length. Activation patching: one token changed at "
         f"position {p.train_len // 2} (Parity: a bit flipped; S3: another element; Dyck: one bracket flipped "
         "between opening and closing; Code-Depth: one depth-changing token replaced by its opposite), target = the "
         f"last position. Conv1D ablation: Mamba with and without Conv1D, {p.conv_seeds} seeds each, on "
         f"{', '.join(t for t in p.conv_tasks if t in p.tasks)} (full steps, no early stop)."
         + (f" Profile claims' cells ({', '.join(a for a in p.profile_archs if a in archs)} on "
            f"{', '.join(t for t in p.profile_tasks if t in p.tasks)}): {p.profile_seeds} seeds, further seeds probed "
            "only, judged by a t-interval over seeds." if p.profile_seeds > 1 else "")
         + (f" Random controls of the probe-subspace ablation: {p.control_draws} random subspaces of equal rank at "
            f"the training length ({p.control_seqs or p.ablation_seqs or p.eval_seqs} sequences), permutation p-value."
            if p.control_draws else ""))
    by = {st: [f"{a}/{t}" for (a, t), c in cells.items() if status(c) == st] for st in ("partial", "at chance")}
    if by["partial"]:
        s += f" Partial: {', '.join(by['partial'])}."
    if by["at chance"]:
        s += f" At chance: {', '.join(by['at chance'])}."
    if p.not_run_budget:
        s += (f" NOT RUN (budget: the preset's steps cannot make them learn, fixed before their claims were read): "
              f"{', '.join(p.not_run_budget)}" + (" (and the Conv1D comparison there)" if any(
                  k.startswith("mamba/") for k in p.not_run_budget) else "") + ".")
    if p.profile_fixed_cap:
        s += " The profile claims' cells train their full steps (no stop once learned)."
    if missing:
        s += " NOT RUN (unavailable in this build): " + "; ".join(f"{k} ({v})" for k, v in missing.items()) + "."
    if pretrained_note:
        s += f" Pretrained-scale part: {pretrained_note}" + ("" if pretrained_note.endswith(".") else ".")
    return s


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_fmt(x)}" for k, x in v.items())
    return str(v)


def tables(cells, conv_runs, p: StatePreset, archs, main_archs, missing, pretrained, seed_cells=None) -> list[Table]:
    ts = []
    rows = []
    for a in main_archs:
        rows.append([a] + [cells[(a, t)]["params"] if (a, t) in cells else None for t in p.tasks])
    if "mamba-noconv" in archs:
        nc = {k[1]: c["params"] for k, c in conv_runs.items() if k[0] == "mamba-noconv"}
        rows.append(["mamba-noconv"] + [nc.get(t) for t in p.tasks])
    ts.append(Table("Parameter counts", ["arch"] + list(p.tasks), rows,
                    note="Counts differ by task only through the vocabulary / output sizes; Mamba without Conv1D "
                         "keeps Mamba's widths."))
    if (p.d_model, p.n_layers) != (128, 4):
        ts.append(paper_param_table(p, main_archs))
    rows = [[a, t, status(c), c["chance"][p.train_len]] + [c["acc_by_len"][L] for L in p.eval_lens]
            + [f"{c.get('steps_trained', c['steps'])} / {c['steps']}", c["batch_size"], c["lr"], c["train_time_s"]]
            for (a, t), c in cells.items()]
    ts.append(Table("Per-token accuracy by evaluation length", ["arch", "task", "status", "chance"]
                    + [f"L={L}" for L in p.eval_lens] + ["steps", "batch", "lr", "train s"], rows,
                    note=f"Trained at length {p.train_len}; chance = majority-label rate at length {p.train_len}; "
                         f"status: learned (>= chance + {p.learned_fraction} x (1 - chance)), partial (>= chance + "
                         f"{p.chance_margin}), at chance; steps: trained / cap."))
    rows = []
    for (a, t), c in cells.items():
        curve = c.get("curve") or []
        rows.append([a, t, status(c)] + [f"{r[0]}: {r[1]:.2f}" for r in curve])
    n = max((len(r) - 3 for r in rows), default=0)
    ts.append(Table("Training-batch accuracy over steps", ["arch", "task", "status"]
                    + [f"log {i + 1}" for i in range(n)], rows,
                    note="step: accuracy of the training batch at that step (logged ten times per run)."))
    L1 = p.n_layers + 1
    rows = []
    for (a, t), c in cells.items():
        if "probes" in c:
            acc = [pr["accuracy"] for pr in c["probes"]]
            rows.append([a, t, status(c)] + acc + [
                float(np.mean([pr["control_accuracy"] for pr in c["probes"]])), c["best_block"],
                largest_jump_layer(acc)])
    ts.append(Table("Probe accuracy by layer", ["arch", "task", "status"] + [f"layer {i}" for i in range(L1)]
                    + ["control (mean)", "best block", "largest jump enters"], rows,
                    note="Layer 0 = embedding; layer i = after block i. Rows not 'learned' come from models that did "
                         "not learn the task; claims do not count them."))
    rows = [[a, t, c["seed"], status(c), c.get("steps_trained", c["steps"])] + [pr["accuracy"] for pr in c["probes"]]
            for (a, t), cs in (seed_cells or {}).items() for c in cs if "probes" in c]
    if rows:
        ts.append(Table("Probe accuracy by layer, further seeds of the profile claims' cells",
                        ["arch", "task", "seed", "status", "steps"] + [f"layer {i}" for i in range(L1)], rows,
                        note="The profile claims judge each cell over all its seeds (seed 0 in the table above)."))
    rows = []
    for (a, t), c in cells.items():
        for kind, by_len in c.get("ablation", {}).items():
            rows.append([a, t, status(c), kind] + [by_len[L]["drop"] if L in by_len else None for L in p.eval_lens])
    ts.append(Table("Accuracy drop from projecting out directions at the best block",
                    ["arch", "task", "status", "directions"] + [f"L={L}" for L in p.eval_lens], rows,
                    note="probe_dir: the probe's top-class direction; probe_subspace: all class directions of the "
                         "probe; random_subspace: a random subspace of the same rank (the control). Empty: length "
                         "not ablated."))
    rows = []
    for (a, t), c in cells.items():
        if "layer_ablation_drop" in c:
            rows.append([a, t, status(c), "probe subspace"] + c["layer_ablation_drop"])
            rows.append([a, t, status(c), "random (control)"] + c.get("layer_random_drop", [None] * L1))
    ts.append(Table("Accuracy drop from projecting out each layer's probe subspace (train length)",
                    ["arch", "task", "status", "directions"] + [f"layer {i}" for i in range(L1)], rows,
                    note="Control: a random subspace of the same rank at the same layer."))
    rows = []
    for (a, t), c in cells.items():
        if "patching" in c:
            pa = c["patching"]
            for j, pos in enumerate(pa["positions"]):
                rows.append([a, t, status(c), pos, pa["n_seqs"]] + [r[j] for r in pa["recovered"]])
    if rows:
        ts.append(Table("Activation patching clean -> corrupted: fraction of the last position's logit gap recovered",
                        ["arch", "task", "status", "patched position", "seqs"] + [f"layer {i}" for i in range(L1)],
                        rows, note=f"One token changed at position {p.train_len // 2}; the clean activation of one "
                                   "layer at one position pasted into the corrupted run."))
    rows = []
    for t in [t for t in p.conv_tasks if t in p.tasks]:
        seeds = sorted(s for v, tt, s in conv_runs if v == "mamba" and tt == t and ("mamba-noconv", t, s) in conv_runs)
        if not seeds:
            continue
        w = [float(np.mean(list(conv_runs[("mamba", t, s)]["acc_by_len"].values()))) for s in seeds]
        o = [float(np.mean(list(conv_runs[("mamba-noconv", t, s)]["acc_by_len"].values()))) for s in seeds]
        rows.append([t, len(seeds), _fmt(w), _fmt(o), float(np.mean(w) - np.mean(o))])
    if rows:
        ts.append(Table("Mamba Conv1D ablation (mean accuracy over lengths, per seed)",
                        ["task", "seeds", "with conv", "without conv", "mean drop"], rows,
                        note="The 95% intervals of the drops are in the claim conv1d_matters_for_prefix_not_dyck."))
    if missing:
        ts.append(Table("Not run", ["variant", "reason"], [[k, v] for k, v in missing.items()]))
    if pretrained:
        ts.append(pretrained_table(pretrained, p))
    return ts


_PRETRAINED_COLS = ["path", "task", "params", "acc (train len)", "best layer", "probe acc by layer", "probe_dir drop"]


def pretrained_table(pretrained: list[dict], p: StatePreset) -> Table:
    """One row per pretrained checkpoint: the known fields, then every other scalar field and the items of a
    ``summary`` dict (scalars) if present; nested results stay in results.json."""
    known = {"path", "task", "params", "acc_by_len", "best_layer", "probe_accuracy", "probe_dir_drop", "summary"}

    def scalar(v) -> bool:
        return v is None or isinstance(v, (int, float, str, bool))

    extra = sorted({k for r in pretrained for k, v in r.items() if k not in known and scalar(v)
                    and not k.endswith(("time_s", "cpu_s"))})
    summ = list(dict.fromkeys(k for r in pretrained for k, v in (r.get("summary") or {}).items() if scalar(v)))
    rows = []
    for r in pretrained:
        acc = r.get("acc_by_len", {})
        rows.append([r.get("path"), r.get("task"), r.get("params"), acc.get(p.train_len, acc.get(str(p.train_len))),
                     r.get("best_layer"), _fmt(r.get("probe_accuracy", [])), r.get("probe_dir_drop")]
                    + [r.get(k) for k in extra] + [(r.get("summary") or {}).get(k) for k in summ])
    return Table("Pretrained checkpoints fine-tuned on a task", _PRETRAINED_COLS + extra + summ, rows,
                 note="Nested results of each checkpoint (ablations, patching, pretraining record) are in "
                      "results.json under results.pretrained.")


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
