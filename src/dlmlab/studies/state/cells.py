"""One cell of the state study: train an architecture on a task, then probe / ablate / patch it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from dlmlab.analysis.direction_ablation import (ablation_drops, pca_basis, probe_basis, project_out,
                                                random_basis, tagging_accuracy)
from dlmlab.analysis.layer_probes import best_layer, collect_states, probe_layers, residual_layers
from dlmlab.analysis.patching import patch_positions
from dlmlab.config import ConfigError
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


def tagging_loss(model, batch):
    logits = model(batch["tokens"])
    loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())
    acc = (logits.argmax(-1) == batch["labels"]).float().mean()
    return loss, {"loss": float(loss.detach()), "acc": float(acc)}


def train_on_task(model, task, p: StatePreset, progress: bool, desc: str, steps: int | None = None,
                  arch: str | None = None) -> list[dict]:
    """Train on ``task`` at ``p.train_len``; steps / lr from the preset for ``arch`` unless ``steps`` is given."""
    steps = steps or p.steps_for(task.name, arch)
    cfg = TrainConfig(steps=steps, batch_size=p.batch_size, lr=p.lr_for(arch), warmup_steps=min(p.warmup_steps, steps),
                      seed=p.seed, log_every=max(1, steps // 10), progress=progress)

    def make_batch(step: int, gen: torch.Generator) -> dict:
        x, y = sample(task, p.batch_size, p.train_len, gen, "train")
        return {"tokens": x, "labels": y}

    return train(model, cfg, make_batch, tagging_loss, out_dir=None, desc=desc)


@dataclass
class EvalData:
    """Fixed evaluation data of one task (same for every architecture)."""

    by_len: dict  # length -> (tokens, labels), held-out (code: test files)
    probe: tuple  # (tokens, labels) at train_len
    patch: tuple | None = None  # (clean, corrupted, clean_label, corrupt_label, corrupt_pos)
    extra: dict = field(default_factory=dict)


def eval_data(task, p: StatePreset) -> EvalData:
    g = lambda k: torch.Generator().manual_seed(p.seed * 7919 + 1_000 + k)  # noqa: E731
    by_len = {L: sample(task, p.eval_seqs, L, g(L), "test") for L in p.eval_lens}
    probe = sample(task, p.probe_seqs, p.train_len, g(7), "test")
    patch = None
    if task.name in p.patch_tasks and hasattr(task, "corrupt"):
        clean, _ = sample(task, p.patch_seqs, p.train_len, g(11), "test")
        c = p.train_len // 2
        corrupted = task.corrupt(clean, c)
        a, b = task.labels(clean)[:, -1], task.labels(corrupted)[:, -1]
        keep = a != b
        patch = (clean[keep], corrupted[keep], a[keep], b[keep], c)
    return EvalData(by_len, probe, patch)


def run_cell(variant: str, task, data: EvalData, p: StatePreset, progress: bool = True,
             analyse: bool = True) -> dict:
    """Train ``variant`` on ``task`` and analyse it -> a JSON-able dict of measurements."""
    torch.manual_seed(p.seed)
    model = build(variant, task, p)
    from dlmlab.models.factory import count_params

    t0 = time.perf_counter()
    hist = train_on_task(model, task, p, progress, desc=f"{variant}/{task.name}", arch=variant)
    cell: dict = {"arch": variant, "task": task.name, "params": count_params(model),
                  "train_time_s": time.perf_counter() - t0, "steps": p.steps_for(task.name, variant),
                  "lr": p.lr_for(variant),
                  "final_train_loss": hist[-1]["loss"] if hist else None,
                  "final_train_acc": hist[-1].get("acc") if hist else None}
    cell["acc_by_len"] = {L: tagging_accuracy(model, x, y) for L, (x, y) in data.by_len.items()}
    cell["learned"] = bool(cell["acc_by_len"][p.train_len] >= p.learned_acc)
    if analyse:
        cell.update(analyse_model(model, data, p))
    return cell


def analyse_model(model, data: EvalData, p: StatePreset) -> dict:
    """Probes per layer, ablations at the best layer (all lengths), per-layer ablation, patching."""
    t1 = time.perf_counter()
    cell: dict = {}
    names = residual_layers(model)
    xs, ys = data.probe
    states = collect_states(model, xs, names)
    probes = probe_layers(model, xs, ys, names, max_samples=p.probe_samples, seed=p.seed,
                          max_iter=p.probe_max_iter, states=states)
    best = best_layer([lp.accuracy for lp in probes])
    cell["probes"] = [lp.to_dict() for lp in probes]
    cell["best_layer"] = best
    cell["n_layers"] = len(names) - 1
    # ablations at the best probe layer, at every evaluation length
    hook, bp = names[best], probes[best].probe
    D = states[hook].shape[-1]
    sub = probe_basis(bp)
    k = int(np.linalg.matrix_rank(sub))
    X = states[hook].flatten(0, 1)
    bases = {"probe_dir": bp.direction[None], "random_dir": random_basis(D, 1, p.seed),
             "probe_subspace": sub, "pca": pca_basis(X, k), "random_subspace": random_basis(D, k, p.seed + 1)}
    cell["ablation_hook"] = hook
    cell["ablation_k"] = k
    cell["ablation"] = ablation_drops(model, data.by_len, hook, bases)
    # per-layer causal profile: project out each layer's probe subspace (train length)
    x0, y0 = data.by_len[p.train_len]
    base0 = tagging_accuracy(model, x0, y0)
    cell["layer_ablation_drop"] = [
        base0 - tagging_accuracy(model, x0, y0, {n: project_out(probe_basis(lp.probe))}) for n, lp in zip(names, probes)
    ]
    if data.patch is not None and len(data.patch[0]) >= 2:
        clean, corrupted, a, b, c = data.patch
        positions = None if p.patch_all_positions else sorted({0, c - 1, c, c + 1, p.train_len - 2, p.train_len - 1})
        res = patch_positions(model, clean, corrupted, a, b, names, positions=positions, target_pos=-1)
        pos = res.positions
        cell["patching"] = {"corrupt_pos": c, "clean_gap": res.clean_gap, "corrupt_gap": res.corrupt_gap,
                            "at_corrupt_pos": res.recovered[:, pos.index(c)].tolist(),
                            "at_last_pos": res.recovered[:, pos.index(p.train_len - 1)].tolist(),
                            "positions": pos, "recovered": res.recovered.tolist()}
    cell["analysis_time_s"] = time.perf_counter() - t1
    return cell
