"""Fully sharded data parallel training (PyTorch FSDP2, ``torch.distributed.fsdp.fully_shard``) under ``torchrun``.

:func:`shard` splits a toolkit model's parameters over the ranks: one FSDP unit per block (its
parameters are gathered just before the block runs and freed after), one for the rest (embedding,
final norm, unembedding).  Each rank keeps 1/N of every parameter, gradient and AdamW state, which is
what lets a 7-8B model train on GPUs that cannot hold it N times.  Backend: nccl on GPU, gloo on CPU
(the tests).  LoRA adapters (:mod:`dlmlab.training.lora`) shard with their blocks; frozen base weights
are gathered for compute but get no gradient or optimizer state.

:func:`train_sharded` is the step loop for such a model: the global batch of ``make_batch(step, gen)``
is split evenly over the ranks (:meth:`DistContext.shard`), FSDP averages the gradients over the
ranks, so N processes reproduce 1 process on the same global batch when the loss is a mean over
equal-weight rows (e.g. per-sequence means).  Same schedule, clipping and AdamW as
:func:`dlmlab.training.train`; it keeps no checkpoints (a run is short or saves its adapters).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from dlmlab.progress import bar as progress_bar
from dlmlab.training.config import TrainConfig, lr_at
from dlmlab.training.distributed import DistContext
from dlmlab.training.loop import LossFn, MakeBatch, NonFiniteLoss, make_optimizer, step_generator


def shard(model: nn.Module, ctx: DistContext) -> nn.Module:
    """Wrap ``model`` in place with FSDP2 over all ``ctx.world_size`` ranks (a no-op for one process)."""
    if ctx.world_size == 1:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dev = next(model.parameters()).device
    mesh = init_device_mesh(dev.type, (ctx.world_size,))
    for block in getattr(model, "blocks", []):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every rank gets the whole (gathered) state dict as plain CPU tensors; a collective under FSDP."""
    return {k: _full(v).detach().cpu() for k, v in model.state_dict().items()}


def full_parameters(model: nn.Module, keep: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """The parameters whose name passes ``keep``, gathered whole as CPU tensors (e.g. only the LoRA adapters of a
    sharded 8B model); a collective under FSDP: every rank calls it."""
    return {n: _full(p).detach().cpu() for n, p in model.named_parameters() if keep(n)}


EvalFn = Callable[[nn.Module, int], dict]


def train_sharded(model: nn.Module, cfg: TrainConfig, make_batch: MakeBatch, loss_fn: LossFn, ctx: DistContext,
                  eval_fn: EvalFn | None = None, eval_every: int = 0, desc: str = "train") -> list[dict]:
    """Train ``model`` (already :func:`shard`-ed when ``ctx.world_size > 1``) for ``cfg.steps`` steps.

    Only parameters with ``requires_grad`` are optimised.  Returns one row per logged step
    (``step, lr, grad_norm`` and the loss metrics averaged over ranks); every ``eval_every`` steps (and
    at the end when ``eval_every``) ``eval_fn(model, step)`` runs on every rank and its dict is added to the
    row.  A non-finite loss or gradient norm stops the run with :class:`NonFiniteLoss`.
    """
    opt = make_optimizer(model, cfg)
    trainable = [p for p in model.parameters() if p.requires_grad]
    history: list[dict] = []
    bar = progress_bar(total=cfg.steps, desc=desc, disable=not (cfg.progress and ctx.is_main), dynamic_ncols=True,
                       leave=False)
    try:
        model.train()
        for step in range(1, cfg.steps + 1):
            lr = lr_at(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            batch = {k: ctx.shard(v) for k, v in make_batch(step, step_generator(cfg.seed, step)).items()}
            loss, metrics = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            clip = cfg.grad_clip if cfg.grad_clip else float("inf")  # 0: no clipping, the norm is still logged
            gnorm = float(_full(torch.nn.utils.clip_grad_norm_(trainable, clip)))
            if ctx.any(not (torch.isfinite(loss.detach()).item() and gnorm == gnorm and abs(gnorm) != float("inf"))):
                raise NonFiniteLoss(f"training stopped at step {step}: the loss or gradient norm became NaN or "
                                    "infinite; lower train.lr, set train.grad_clip, or check the data")
            opt.step()
            bar.update(1)
            evaluating = eval_fn is not None and eval_every and (step % eval_every == 0 or step == cfg.steps)
            if step % cfg.log_every == 0 or step == cfg.steps or evaluating:
                row = {"step": step, "lr": lr, "grad_norm": gnorm,
                       **{k: ctx.mean(float(v)) for k, v in metrics.items()}}
                if evaluating:
                    row.update(eval_fn(model, step))
                    model.train()
                history.append(row)
                bar.set_postfix(loss=f"{row.get('loss', float('nan')):.4f}")
    finally:
        bar.close()
    model.eval()
    return history
