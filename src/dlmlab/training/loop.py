"""The training loop: AdamW, LR schedule, tqdm progress, JSONL metrics, exact resume, DDP.

Determinism: batch ``step`` is drawn from a generator seeded with (seed, step),
so a resumed run sees exactly the batches (and diffusion noise) an uninterrupted
run would.  ``make_batch(step, gen)`` returns a dict of *global* batch tensors
(dim 0 = batch); with N processes each rank gets its 1/N slice, so 2 processes
reproduce 1 process with the same global batch.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from dlmlab.progress import bar as progress_bar
from dlmlab.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from dlmlab.training.config import TrainConfig, lr_at
from dlmlab.training.distributed import DistContext, init_from_env

Batch = dict[str, torch.Tensor]
MakeBatch = Callable[[int, torch.Generator], Batch]
LossFn = Callable[[torch.nn.Module, Batch], tuple[torch.Tensor, dict]]
EvalFn = Callable[[torch.nn.Module, int], dict]


def step_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not biases, norms, or 1-D params)."""
    decay, no_decay = [], []
    seen = set()
    for p in model.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def _read_metrics(path: Path, upto: int) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a kill
            if row.get("step", 0) <= upto:
                rows.append(row)
    return rows


def train(
    model: torch.nn.Module,
    cfg: TrainConfig,
    make_batch: MakeBatch,
    loss_fn: LossFn,
    out_dir: str | Path | None = None,
    eval_fn: EvalFn | None = None,
    resume: bool = True,
    extra_state: dict | None = None,
    desc: str = "train",
    ctx: DistContext | None = None,
) -> list[dict]:
    """Train ``model`` in place for ``cfg.steps`` steps; returns the metric rows.

    With ``out_dir`` metrics go to ``out_dir/metrics.jsonl`` and checkpoints to
    ``out_dir/checkpoints``; an existing checkpoint is resumed when ``resume``.
    """
    ctx = ctx or init_from_env()
    out = Path(out_dir) if out_dir is not None else None
    opt = make_optimizer(model, cfg)
    start = 0
    history: list[dict] = []
    metrics_path = out / "metrics.jsonl" if out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        ck = latest_checkpoint(out) if resume else None
        if ck is not None:
            state = load_checkpoint(ck, model, opt)
            start = int(state["step"])
            history = _read_metrics(metrics_path, start)
        if ctx.is_main:  # rewrite metrics so rows after the checkpoint (from a killed run) vanish
            tmp = metrics_path.with_name("metrics.jsonl.tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in history))
            os.replace(tmp, metrics_path)
    net = DDP(model) if ctx.world_size > 1 else model
    state_extra = {"train_config": asdict(cfg), **(extra_state or {})}

    def checkpoint(step: int) -> None:
        if out is not None and ctx.is_main:
            save_checkpoint(out, step, model, opt, state_extra, keep=cfg.keep_checkpoints)
        ctx.barrier()

    bar = progress_bar(total=cfg.steps, initial=start, desc=desc, disable=not (cfg.progress and ctx.is_main),
               dynamic_ncols=True, leave=False)
    log = open(metrics_path, "a") if (metrics_path and ctx.is_main) else None
    try:
        model.train()
        for step in range(start + 1, cfg.steps + 1):
            lr = lr_at(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            batch = {k: ctx.shard(v) for k, v in make_batch(step, step_generator(cfg.seed, step)).items()}
            loss, metrics = loss_fn(net, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip) if cfg.grad_clip else None
            opt.step()
            bar.update(1)
            if step % cfg.log_every == 0 or step == cfg.steps:
                row = {"step": step, "lr": lr, **{k: ctx.mean(float(v)) for k, v in metrics.items()}}
                if gnorm is not None:
                    row["grad_norm"] = float(gnorm)
                if eval_fn is not None and cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps):
                    model.eval()
                    with torch.no_grad():
                        row.update({f"eval_{k}": v for k, v in eval_fn(model, step).items()})
                    model.train()
                history.append(row)
                bar.set_postfix(loss=f"{row.get('loss', float('nan')):.4f}")
                if log is not None:
                    log.write(json.dumps(row) + "\n")
                    log.flush()
            if cfg.ckpt_every and step % cfg.ckpt_every == 0 and step != cfg.steps:
                checkpoint(step)
        if start < cfg.steps or (out is not None and latest_checkpoint(out) is None):
            checkpoint(cfg.steps)
    finally:
        bar.close()
        if log is not None:
            log.close()
    model.eval()
    return history
