"""One cell of the state study: train an architecture on a task, then probe / ablate / patch it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from dlmlab.analysis.direction_ablation import (ablation_drops, per_sequence_accuracy, probe_basis, project_out,
                                                random_basis, random_subspace_drops, tagging_accuracy)
from dlmlab.analysis.layer_probes import best_layer, collect_states, probe_layers, residual_layers
from dlmlab.analysis.patching import patch_positions
from dlmlab.config import ConfigError
from dlmlab.objectives import TaggingObjective
from dlmlab.report.claims import learned_level
from dlmlab.studies.state.presets import StatePreset
from dlmlab.tasks.code_depth import CodeDepthTask
from dlmlab.tasks.dyck import DyckTask
from dlmlab.tasks.parity import ParityTask
from dlmlab.tasks.s3 import S3Task
from dlmlab.training import TrainConfig, train


def make_task(name: str, p: StatePreset):
    if name == "parity":
        return ParityTask()
    if name == "s3":
        return S3Task()
    if name == "dyck":
        return DyckTask(k=p.dyck_k, max_depth=p.dyck_max_depth)
    if name == "code_depth":
        return CodeDepthTask(max_depth=p.code_max_depth, max_files=p.code_max_files)
    raise ConfigError(f"unknown task {name!r}")


def sample(task, n: int, length: int, gen: torch.Generator, split: str = "train"):
    """-> tokens [n, length], labels [n, length]; code_depth draws from its train or test files."""
    if isinstance(task, CodeDepthTask):
        return task.sample(n, length, gen, split=split)
    return task.sample(n, length, gen)


def variant_overrides(variant: str) -> tuple[str, dict]:
    """'mamba-noconv' -> ('mamba', {'use_conv': False}); other names are factory architectures."""
    if variant == "mamba-noconv":
        return "mamba", {"use_conv": False}
    return variant, {}


def build(variant: str, task, p: StatePreset):
    """Build a model for ``task``; raises ImportError / ConfigError when the variant is unavailable."""
    from dlmlab.models.factory import build_model

    arch, over = variant_overrides(variant)
    return build_model(arch, vocab_size=task.vocab_size, n_out=task.n_classes, d_model=p.d_model,
                       n_layers=p.n_layers, **over)


TAGGING = TaggingObjective()  # loss: (model, {"tokens", "labels"}) -> (float32 cross-entropy, {loss, acc})


@dataclass(eq=False)
class _Remembering(TaggingObjective):
    """The tagging objective, keeping its last step's metrics (tensors) for the logging hook."""

    last: dict = field(default_factory=dict)

    def loss(self, model, batch):
        loss, metrics = TAGGING.loss(model, batch)  # looked up at call time
        self.last = metrics
        return loss, metrics


class _Learned(Exception):
    """Raised from the training loop's evaluation hook when the check batch reaches the stop level."""


def train_on_task(model, task, p: StatePreset, progress: bool, desc: str, steps: int | None = None,
                  arch: str | None = None, check: tuple | None = None, stop_at: float | None = None) -> list[dict]:
    """Train on ``task`` at ``p.train_len``; steps / lr from the preset for ``arch`` unless ``steps`` is given.

    Ten times over training (and at the end) a row ``{"step", "acc", "loss"}`` (the training batch's accuracy
    and loss at that step) is logged, with ``check_acc``: the accuracy on ``check`` = (tokens, labels) when given.
    ``stop_at``: training stops at the first logged step whose ``check_acc`` is >= it (the model learned the task;
    the remaining steps are not paid).  Returns the rows; the last row's step is the number of steps trained."""
    steps = steps or p.steps_for(task.name, arch)
    every = max(1, steps // 10)
    cfg = TrainConfig(steps=steps, batch_size=p.batch_size, lr=p.lr_for(arch), warmup_steps=min(p.warmup_steps, steps),
                      seed=p.seed, log_every=every, eval_every=every, progress=progress)
    objective = _Remembering()
    rows: list[dict] = []

    def batches(step: int, gen: torch.Generator) -> dict:
        x, y = sample(task, p.batch_size, p.train_len, gen, "train")
        return {"tokens": x, "labels": y}

    def on_log(model, step: int) -> dict:
        row = {"step": step, **{k: float(v) for k, v in objective.last.items()}}
        if check is not None:
            row["check_acc"] = tagging_accuracy(model, *check)
        rows.append(row)
        if stop_at is not None and row.get("check_acc", -1.0) >= stop_at and step < steps:
            raise _Learned
        return {}

    try:
        train(model, cfg, batches, objective, out_dir=None, eval_fn=on_log, desc=desc)
    except _Learned:
        model.eval()
    return rows


def check_set(task, p: StatePreset) -> tuple:
    """The fixed batch (tokens, labels) [check_seqs, train_len] whose accuracy decides when training stops (drawn
    from the training split with its own seed: not the evaluation data)."""
    return sample(task, p.check_seqs, p.train_len, torch.Generator().manual_seed(p.seed * 7919 + 3), "train")


@dataclass
class EvalData:
    """Fixed evaluation data of one task (same for every architecture and seed)."""

    by_len: dict  # length -> (tokens, labels), held-out (code: test files)
    probe: tuple  # (tokens, labels) at train_len
    patch: tuple | None = None  # (clean, corrupted, clean_label, corrupt_label, corrupt_pos)
    chance: dict = field(default_factory=dict)  # length -> majority-label rate of by_len's labels


def majority_rate(labels: torch.Tensor) -> float:
    """Accuracy of always predicting the most frequent label of ``labels`` [B,T] (the chance level)."""
    return float(torch.bincount(labels.flatten()).max()) / max(1, labels.numel())


def patch_data(task, p: StatePreset, gen: torch.Generator, pos: int):
    """(clean, corrupted, clean_label, corrupt_label, pos) of up to ``p.patch_seqs`` rows whose corruption
    at ``pos`` is valid and changes the last label; candidates are drawn in rounds of ``4 * patch_seqs``."""
    keep_x = []
    n = 0
    for _ in range(50):  # Code-Depth keeps a few percent of its windows (a depth-changing token at ``pos``)
        x, _ = sample(task, 4 * p.patch_seqs, p.train_len, gen, "test")
        x = x[task.corruptible(x, pos)]
        x = x[task.labels(x)[:, -1] != task.labels(task.corrupt(x, pos))[:, -1]]
        keep_x.append(x)
        n += len(x)
        if n >= p.patch_seqs:
            break
    clean = torch.cat(keep_x)[:p.patch_seqs]
    corrupted = task.corrupt(clean, pos)
    return clean, corrupted, task.labels(clean)[:, -1], task.labels(corrupted)[:, -1], pos


def eval_data(task, p: StatePreset) -> EvalData:
    g = lambda k: torch.Generator().manual_seed(p.seed * 7919 + 1_000 + k)  # noqa: E731
    by_len = {L: sample(task, p.eval_seqs, L, g(L), "test") for L in p.eval_lens}
    probe = sample(task, p.probe_seqs, p.train_len, g(7), "test")
    patch = None
    if task.name in p.patch_tasks and hasattr(task, "corrupt"):
        patch = patch_data(task, p, g(11), p.train_len // 2)
    return EvalData(by_len, probe, patch, {L: majority_rate(y) for L, (_, y) in by_len.items()})


def run_cell(variant: str, task, data: EvalData, p: StatePreset, progress: bool = True,
             analyse: bool | str = True, until_learned: bool | None = None) -> dict:
    """Train ``variant`` on ``task`` (seed ``p.seed``) and analyse it -> a JSON-able dict of measurements.

    ``analyse``: True (every analysis of :func:`analyse_model`), ``"probes"`` (the probes only) or False;
    ``until_learned``: stop once learned (None: ``p.until_learned``; the Conv1D comparison passes False so both
    arms train the same steps).

    ``acc_by_len`` {length: per-token accuracy}; ``acc_per_seq`` {length: [eval_seqs] per-sequence
    accuracy}; ``chance`` {length: majority-label rate}; ``above_chance`` (at ``train_len``: accuracy >=
    chance + ``chance_margin``), ``above_chance_by_len``; ``learned`` (>= ``learned_level``: ``learned_fraction`` of the
    way from chance to perfect, the precondition of every claim); ``curve``: [[step, training-batch accuracy, loss,
    check-batch accuracy], ...] logged ten times over training; ``steps_trained`` (< ``steps`` when
    ``p.until_learned`` stopped it: the check batch reached ``stop_at``).
    """
    torch.manual_seed(p.seed)
    model = build(variant, task, p)
    from dlmlab.models.factory import count_params

    t0 = time.perf_counter()
    check = check_set(task, p)
    until_learned = p.until_learned if until_learned is None else until_learned
    stop_at = learned_level(majority_rate(check[1]), p.stop_fraction) if until_learned else None
    hist = train_on_task(model, task, p, progress, desc=f"{variant}/{task.name}", arch=variant, check=check,
                         stop_at=stop_at)
    cell: dict = {"arch": variant, "task": task.name, "seed": p.seed, "params": count_params(model),
                  "train_time_s": time.perf_counter() - t0, "steps": p.steps_for(task.name, variant),
                  "steps_trained": hist[-1]["step"] if hist else 0, "stop_at": stop_at,
                  "lr": p.lr_for(variant), "batch_size": p.batch_size, "train_len": p.train_len,
                  "final_train_loss": hist[-1]["loss"] if hist else None,
                  "final_train_acc": hist[-1].get("acc") if hist else None,
                  "curve": [[r["step"], r.get("acc"), r.get("loss"), r.get("check_acc")] for r in hist]}
    per_seq = {L: per_sequence_accuracy(model, x, y) for L, (x, y) in data.by_len.items()}
    cell["acc_per_seq"] = {L: v.tolist() for L, v in per_seq.items()}
    cell["acc_by_len"] = {L: float(v.mean()) for L, v in per_seq.items()}
    cell["chance"] = dict(data.chance)
    cell["above_chance_by_len"] = {L: bool(cell["acc_by_len"][L] >= data.chance[L] + p.chance_margin)
                                   for L in data.by_len}
    cell["above_chance"] = cell["above_chance_by_len"][p.train_len]
    cell["learned_level"] = learned_level(data.chance[p.train_len], p.learned_fraction)
    cell["learned"] = bool(cell["acc_by_len"][p.train_len] >= cell["learned_level"])
    if analyse:
        cell.update(analyse_model(model, data, p, probes_only=analyse == "probes"))
    return cell


def _subset(by_len: dict, n: int, lens=None) -> dict:
    """The first ``n`` sequences (0 = all) of the evaluation lengths ``lens`` (None / empty = all)."""
    return {L: (x[:n], y[:n]) if n else (x, y) for L, (x, y) in by_len.items() if not lens or L in lens}


def analyse_model(model, data: EvalData, p: StatePreset, probes_only: bool = False, layer_draws: bool = False) -> dict:
    """Probes per layer; ablations at the best block (all lengths), with ``p.control_draws`` random subspaces of
    equal rank at the training length (``control``); per-layer probe-subspace ablation against a random subspace
    of equal rank (``layer_draws``: also against ``p.control_draws`` of them per layer, ``layer_control``);
    activation patching per position and layer (``probes_only``: the probes, best layer / block and ``n_layers``
    only)."""
    t1 = time.perf_counter()
    cell: dict = {}
    names = residual_layers(model)
    xs, ys = data.probe
    states = collect_states(model, xs, names)
    probes = probe_layers(model, xs, ys, names, max_samples=p.probe_samples, seed=p.seed,
                          max_iter=p.probe_max_iter, states=states)
    acc = [lp.accuracy for lp in probes]
    best = best_layer(acc)
    block = 1 + best_layer(acc[1:])  # best block (the embedding only carries token identity)
    cell["probes"] = [lp.to_dict() for lp in probes]
    cell["best_layer"] = best
    cell["best_block"] = block
    cell["n_layers"] = len(names) - 1
    if probes_only:
        cell["analysis_time_s"] = time.perf_counter() - t1
        return cell
    # ablations at the best block, at every evaluation length
    hook, bp = names[block], probes[block].probe
    D = states[hook].shape[-1]
    sub = probe_basis(bp)
    k = int(np.linalg.matrix_rank(sub))
    bases = {"probe_dir": bp.direction[None], "probe_subspace": sub, "random_subspace": random_basis(D, k, p.seed + 1)}
    cell["ablation_hook"] = hook
    cell["ablation_k"] = k
    cell["ablation"] = ablation_drops(model, _subset(data.by_len, p.ablation_seqs, p.ablation_lens), hook, bases)
    # the random control's distribution at the training length: control_draws random subspaces of the same rank,
    # on the first control_seqs sequences (the probe subspace's drop measured on the same sequences)
    xc, yc = _subset(data.by_len, p.control_seqs)[p.train_len]
    if p.control_draws:
        cell["control"] = {"n_seqs": int(len(xc)), "value": tagging_accuracy(model, xc, yc)
                           - tagging_accuracy(model, xc, yc, {hook: project_out(sub)}),
                           "draws": random_subspace_drops(model, xc, yc, hook, D, k, p.control_draws,
                                                          p.seed * 100_003 + 11).tolist()}
    # ... and at each unseen length (>= OOD_MIN_LEN) among the ablation lengths: the same control_draws random
    # subspaces (same seed, so a draw's mean over lengths is a draw of the mean drop) on control_ood_seqs sequences
    if p.control_draws:
        from dlmlab.studies.state.claims_base import OOD_MIN_LEN

        n_ood = p.control_ood_seqs or p.control_seqs
        lens = [L for L in (p.ablation_lens or p.eval_lens) if L >= OOD_MIN_LEN]
        ood = _subset(data.by_len, n_ood, lens) if lens else {}
        if ood:
            cell["control_ood"] = {
                "n_seqs": int(n_ood), "value_by_len": {L: tagging_accuracy(model, x, y) - tagging_accuracy(
                    model, x, y, {hook: project_out(sub)}) for L, (x, y) in ood.items()},
                "draws_by_len": {L: random_subspace_drops(model, x, y, hook, D, k, p.control_draws,
                                                          p.seed * 100_003 + 11).tolist() for L, (x, y) in ood.items()}}
    # per-layer causal profile: project out each layer's probe subspace, and a random subspace of the same
    # rank as its control (train length)
    x0, y0 = _subset(data.by_len, p.ablation_seqs)[p.train_len]
    base0 = tagging_accuracy(model, x0, y0)
    drops, ctrl = [], []
    for i, (n, lp) in enumerate(zip(names, probes)):
        b = probe_basis(lp.probe)
        drops.append(base0 - tagging_accuracy(model, x0, y0, {n: project_out(b)}))
        rk = int(np.linalg.matrix_rank(b))
        rnd = random_basis(states[n].shape[-1], rk, p.seed + 2 + i)
        ctrl.append(base0 - tagging_accuracy(model, x0, y0, {n: project_out(rnd)}))
    cell["layer_ablation_drop"] = drops
    cell["layer_random_drop"] = ctrl
    if layer_draws and p.control_draws:  # per layer: the probe-subspace drop and its random control's distribution
        cell["layer_control"] = []
        for i, (n, lp) in enumerate(zip(names, probes)):
            b = probe_basis(lp.probe)
            cell["layer_control"].append({
                "value": tagging_accuracy(model, xc, yc) - tagging_accuracy(model, xc, yc, {n: project_out(b)}),
                "draws": random_subspace_drops(model, xc, yc, n, states[n].shape[-1], int(np.linalg.matrix_rank(b)),
                                               p.control_draws, p.seed * 100_003 + 1_000 * (i + 1)).tolist()})
    if data.patch is not None and len(data.patch[0]) >= 2:
        clean, corrupted, a, b, c = data.patch
        T = clean.shape[1]
        positions = None if p.patch_all_positions else sorted({0, c - 1, c, c + 1, T - 2, T - 1})
        res = patch_positions(model, clean, corrupted, a, b, names, positions=positions, target_pos=-1)
        pos = res.positions
        cell["patching"] = {"corrupt_pos": c, "n_seqs": int(len(clean)), "clean_gap": res.clean_gap,
                            "corrupt_gap": res.corrupt_gap,
                            "at_corrupt_pos": res.recovered[:, pos.index(c)].tolist(),
                            "at_last_pos": res.recovered[:, pos.index(T - 1)].tolist(),
                            "positions": pos, "recovered": res.recovered.tolist()}
    cell["analysis_time_s"] = time.perf_counter() - t1
    return cell
