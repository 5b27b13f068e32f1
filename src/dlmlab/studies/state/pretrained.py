"""Pretrained scale: the same probes / ablations / patching on a Hugging Face checkpoint.

:class:`~dlmlab.models.hf_hooked.HFHooked` (formerly ``HFTagger``, still importable from here)
wraps a local Hugging Face base model (Pythia = ``GPTNeoXModel``, ``MambaModel``) plus a linear
tagging head and exposes the toolkit hook points (``embed``, ``blocks.{i}.resid_pre|mixer_out|
resid_post``, ``final``, ``logits``), so the generic analyses apply unchanged.

:func:`run_pretrained` loads a checkpoint from a LOCAL path (never a hub download),
fine-tunes it on a task with the toolkit training loop, and analyses it.
Task token ids ``0..V-1`` are fed as the checkpoint's token ids ``0..V-1``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dlmlab.models.hf_hooked import HFHooked, load_hf_hooked

HFTagger = HFHooked  # the wrapper's former name (it lives in dlmlab.models.hf_hooked now)


def load_local(path: str | Path, n_out: int, dtype: torch.dtype = torch.float32) -> HFHooked:
    """Load a base model from a local directory (``local_files_only``) with an ``n_out``-way tagging head."""
    if n_out <= 0:
        raise ValueError(f"n_out must be > 0 (a tagging head), got {n_out}")
    return load_hf_hooked(path, n_out, dtype)


def run_pretrained(path: str | Path, task_name: str, p, progress: bool = True) -> dict:
    """Fine-tune the checkpoint at ``path`` on ``task_name`` (``p.pretrained_steps`` steps), then analyse."""
    from dlmlab.models.factory import count_params
    from dlmlab.analysis.direction_ablation import tagging_accuracy
    from dlmlab.studies.state.cells import analyse_model, eval_data, make_task, train_on_task

    task = make_task(task_name, p)
    torch.manual_seed(p.seed)
    model = load_local(path, task.n_classes)
    if task.vocab_size > model.vocab_size:
        raise ValueError(f"task {task_name} needs {task.vocab_size} token ids; checkpoint {path} has {model.vocab_size}")
    data = eval_data(task, p)
    train_on_task(model, task, p, progress, desc=f"{Path(path).name}/{task_name}", steps=p.pretrained_steps)
    res = {"path": str(path), "task": task_name, "params": count_params(model),
           "acc_by_len": {L: tagging_accuracy(model, x, y) for L, (x, y) in data.by_len.items()}}
    res.update(analyse_model(model, data, p))
    res["probe_accuracy"] = [pr["accuracy"] for pr in res["probes"]]
    drops = [v["drop"] for v in res["ablation"]["probe_dir"].values()]
    res["probe_dir_drop"] = sum(drops) / len(drops)
    return res
