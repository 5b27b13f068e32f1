"""Pretrained scale: the same probes / ablations / patching on a Hugging Face checkpoint.

:class:`~dlmlab.models.hf_hooked.HFHooked` (formerly ``HFTagger``, still importable from here)
wraps a local Hugging Face base model (Pythia = ``GPTNeoXModel``, ``MambaModel``) plus a linear
tagging head and exposes the toolkit hook points (``embed``, ``blocks.{i}.resid_pre|mixer_out|
resid_post``, ``final``, ``logits``), so the generic analyses apply unchanged.

:func:`run_pretrained` loads a checkpoint from a LOCAL path (never a hub download),
fine-tunes it on a task with the toolkit training loop, and analyses it.  The checkpoints are
real ones (Pythia, Mamba) or the small ones :mod:`dlmlab.studies.state.pretrain_small` pretrains.
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


def _skip_block(model, i: int):
    """Hooks under which block ``i`` is skipped: its output is its input (``resid_post := resid_pre``)."""
    held: dict = {}

    def keep(x, hp):
        held["x"] = x

    return model.hooks({f"blocks.{i}.resid_pre": keep, f"blocks.{i}.resid_post": lambda x, hp: held["x"].to(x.dtype)})


def _constant(value: torch.Tensor):
    """fn(act [B,T,D]) -> ``value`` [D] at every batch row and position."""
    return lambda a: value.to(a.dtype).expand_as(a)


@torch.no_grad()
def block_ablations(model, by_len: dict) -> dict:
    """Whole-layer ablations, per block and evaluation length.

    ``skip``: block ``i`` replaced by the identity; ``mixer_mean``: block ``i``'s ``mixer_out``
    (attention / SSM output) replaced by its mean over that evaluation set's sequences and
    positions (it keeps the average contribution and removes what depends on the tokens).
    Returns {"base": {L: acc}, "skip": {L: [drop per block]}, "mixer_mean": {L: [...]}}
    (drop = base accuracy - ablated accuracy; ``mixer_mean`` only where blocks expose ``mixer_out``).
    """
    from dlmlab.analysis.direction_ablation import tagging_accuracy
    from dlmlab.analysis.layer_probes import collect_states

    n = len(model.blocks)
    mixers = [f"blocks.{i}.mixer_out" for i in range(n) if f"blocks.{i}.mixer_out" in model.hook_points]
    out: dict = {"base": {}, "skip": {}}
    if len(mixers) == n:
        out["mixer_mean"] = {}
    for L, (x, y) in by_len.items():
        base = tagging_accuracy(model, x, y)
        out["base"][L] = base
        drops = []
        for i in range(n):
            with _skip_block(model, i):
                drops.append(base - tagging_accuracy(model, x, y))
        out["skip"][L] = drops
        if "mixer_mean" in out:
            means = {h: a.mean((0, 1)) for h, a in collect_states(model, x, mixers).items()}
            out["mixer_mean"][L] = [base - tagging_accuracy(model, x, y, {h: _constant(m)}) for h, m in means.items()]
    return out


def layer_ablation_control(model, data, p) -> list[float]:
    """Per layer (embedding first): accuracy drop at the training length from projecting out a random
    subspace of the rank of that layer's probe subspace: the control of ``layer_ablation_drop``.

    The probes are fitted as :func:`~dlmlab.studies.state.cells.analyse_model` fits them (same data,
    seed and settings, hence the same probes) to read their ranks.
    """
    import numpy as np

    from dlmlab.analysis.direction_ablation import probe_basis, project_out, random_basis, tagging_accuracy
    from dlmlab.analysis.layer_probes import probe_layers, residual_layers

    names = residual_layers(model)
    xs, ys = data.probe
    probes = probe_layers(model, xs, ys, names, max_samples=p.probe_samples, seed=p.seed, max_iter=p.probe_max_iter)
    x0, y0 = data.by_len[p.train_len]
    base = tagging_accuracy(model, x0, y0)
    drops = []
    for j, lp in enumerate(probes):
        basis = probe_basis(lp.probe)
        k = int(np.linalg.matrix_rank(basis))
        rnd = random_basis(basis.shape[-1], k, p.seed + 17 + j)
        drops.append(base - tagging_accuracy(model, x0, y0, {lp.name: project_out(rnd)}))
    return drops


@torch.no_grad()
def last_layer_patching(model, patch) -> dict | None:
    """Activation patching (clean -> corrupted) into the last block, at every position.

    Hooks: the last block's input ``resid_pre`` and its mixer output ``mixer_out`` (what the last
    layer reads from, and writes across, positions); the answer is read at the last position.
    Returns {"hooks", "positions", "recovered" [hook][position], "at_last_pos" [hook],
    "clean_gap", "corrupt_gap", "corrupt_pos"} or ``None`` without patching data.
    """
    from dlmlab.analysis.patching import patch_positions

    if patch is None or len(patch[0]) < 2:
        return None
    clean, corrupted, a, b, c = patch
    last = len(model.blocks) - 1
    hooks = [h for h in (f"blocks.{last}.resid_pre", f"blocks.{last}.mixer_out") if h in model.hook_points]
    res = patch_positions(model, clean, corrupted, a, b, hooks, positions=None, target_pos=-1)
    return {"hooks": hooks, "positions": res.positions, "recovered": res.recovered.tolist(),
            "at_last_pos": res.recovered[:, -1].tolist(), "at_corrupt_pos": res.recovered[:, c].tolist(),
            "clean_gap": res.clean_gap, "corrupt_gap": res.corrupt_gap, "corrupt_pos": c}


def run_pretrained(path: str | Path, task_name: str, p, progress: bool = True) -> dict:
    """Fine-tune the checkpoint at ``path`` on ``task_name`` (``p.pretrained_steps`` steps), then analyse.

    The same analyses as a toy cell (:func:`~dlmlab.studies.state.cells.analyse_model`: probes per
    layer, probe-direction / subspace ablations with random and PCA controls at every length,
    per-layer probe-subspace ablation, patching over all layers at a few positions; patching data is
    built for the task even when it is not among ``p.patch_tasks``) plus
    ``layer_ablation_control_drop`` (random subspaces of the same ranks), ``block_ablation``
    (:func:`block_ablations`), ``last_layer_patching`` (:func:`last_layer_patching`), ``arch``,
    ``final_train_loss``, CPU seconds, and ``pretrain`` (the record of a small pretrained folder).
    """
    import dataclasses
    import time

    from dlmlab.analysis.direction_ablation import tagging_accuracy
    from dlmlab.config import ConfigError
    from dlmlab.models.factory import count_params
    from dlmlab.studies.state.cells import analyse_model, eval_data, make_task, train_on_task
    from dlmlab.studies.state.pretrain_small import pretrain_record

    task = make_task(task_name, p)
    torch.manual_seed(p.seed)
    model = load_local(path, task.n_classes)
    if task.vocab_size > model.vocab_size:
        raise ConfigError(f"task {task_name} needs {task.vocab_size} token ids; "
                          f"checkpoint {path} has {model.vocab_size}")
    patch_tasks = list(p.patch_tasks) + ([task_name] if task_name not in p.patch_tasks else [])
    data = eval_data(task, dataclasses.replace(p, patch_tasks=patch_tasks))
    t0 = time.process_time()
    hist = train_on_task(model, task, p, progress, desc=f"{Path(path).name}/{task_name}", steps=p.pretrained_steps)
    res = {"path": str(path), "task": task_name, "arch": model.base.config.model_type, "params": count_params(model),
           "train_len": p.train_len,
           "steps": p.pretrained_steps, "final_train_loss": hist[-1]["loss"] if hist else None,
           "finetune_cpu_s": time.process_time() - t0,
           "acc_by_len": {L: tagging_accuracy(model, x, y) for L, (x, y) in data.by_len.items()}}
    record = pretrain_record(path)
    if record is not None:
        res["pretrain"] = {k: v for k, v in record.items() if k != "config"}
    t1 = time.process_time()
    res.update(analyse_model(model, data, p, layer_draws=True))  # readability vs causality is judged here
    res["probe_accuracy"] = [pr["accuracy"] for pr in res["probes"]]
    drops = [v["drop"] for v in res["ablation"]["probe_dir"].values()]
    res["probe_dir_drop"] = sum(drops) / len(drops)
    if "layer_random_drop" not in res:  # analyse_model's per-layer control, where it does not compute it
        res["layer_random_drop"] = layer_ablation_control(model, data, p)
    res["block_ablation"] = block_ablations(model, data.by_len)
    res["last_layer_patching"] = last_layer_patching(model, data.patch)
    res["analysis_cpu_s"] = time.process_time() - t1
    res["summary"] = summary(res, data, p)
    return res


def summary(res: dict, data, p) -> dict:
    """Scalar read-outs of one checkpoint's nested results (for the report's table).

    ``chance``: majority-label rate at the training length; ``probe_jump_layer``: the layer (0 =
    embedding) whose probe accuracy rose most over the layer before it, ``probe_jump`` that rise;
    ``causal_layer``: the layer whose probe-subspace ablation drops accuracy most, with that drop and the
    random-subspace control at the same layer; ``skip_last`` / ``mixer_mean_last``: accuracy drops from
    skipping the last block / mean-ablating its mixer (training length); ``patch_last_*``: fraction of the
    logit gap recovered by patching the last block's input at the corrupted position and its mixer
    output at the last position; ``pretrain_bits_per_byte``: held-out loss of a small pretrained model.
    """
    L = p.train_len
    y = data.by_len[L][1]
    out = {"chance": float(torch.bincount(y.flatten()).max()) / max(1, y.numel()),
           f"acc@{max(res['acc_by_len'])}": res["acc_by_len"][max(res["acc_by_len"])]}
    acc = res["probe_accuracy"]
    if len(acc) >= 2:
        rises = [b - a for a, b in zip(acc, acc[1:])]
        j = max(range(len(rises)), key=rises.__getitem__)
        out.update(probe_jump_layer=j + 1, probe_jump=rises[j])
    drops, ctrl = res.get("layer_ablation_drop") or [], res.get("layer_random_drop") or []
    if drops:
        k = max(range(len(drops)), key=drops.__getitem__)
        out.update(causal_layer=k, causal_drop=drops[k], causal_control=ctrl[k] if k < len(ctrl) else None)
    ab = res["block_ablation"]
    out["skip_last"] = ab["skip"][L][-1]
    if "mixer_mean" in ab:
        out["mixer_mean_last"] = ab["mixer_mean"][L][-1]
    ll = res.get("last_layer_patching")
    if ll:
        out["patch_last_pre@corrupt"] = ll["at_corrupt_pos"][0]
        if len(ll["hooks"]) > 1:
            out["patch_last_mixer@last"] = ll["at_last_pos"][1]
    if "pretrain" in res:
        out["pretrain_bits_per_byte"] = res["pretrain"].get("val_bits_per_byte")
    return out
