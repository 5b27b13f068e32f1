"""Fully sharded data parallel training (PyTorch FSDP2, ``torch.distributed.fsdp.fully_shard``) under ``torchrun``.

:func:`shard` splits a toolkit model's parameters over the ranks: one FSDP unit per block (its
parameters are gathered just before the block runs and freed after), one for the rest (embedding,
final norm, unembedding).  Each rank keeps 1/N of every parameter, gradient and AdamW state, which is
what lets a 7-8B model train on GPUs that cannot hold it N times.  Backend: nccl on GPU, gloo on CPU
(the tests).  LoRA adapters (:mod:`dlmlab.training.lora`) shard with their blocks; frozen base weights
are gathered for compute but get no gradient or optimizer state.

:func:`dlmlab.training.train` with ``parallel="fsdp"`` trains such a model (the one training loop): the
global batch of ``make_batch(step, gen)`` is split evenly over the ranks (:meth:`DistContext.shard`), FSDP
averages the gradients over the ranks, so N processes reproduce 1 process on the same global batch when
the loss is a mean over equal-weight rows (e.g. per-sequence means).  Gather the trained weights with
:func:`full_state_dict` / :func:`full_parameters` (every rank calls them).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from dlmlab.training.distributed import DistContext, gathered


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


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every rank gets the whole (gathered) state dict as plain CPU tensors; a collective under FSDP."""
    return {k: gathered(v).detach().cpu() for k, v in model.state_dict().items()}


def full_parameters(model: nn.Module, keep: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """The parameters whose name passes ``keep``, gathered whole as CPU tensors (e.g. only the LoRA adapters of a
    sharded 8B model); a collective under FSDP: every rank calls it."""
    return {n: gathered(p).detach().cpu() for n, p in model.named_parameters() if keep(n)}

