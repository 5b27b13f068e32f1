"""Data-parallel helpers for ``torchrun`` (gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's equal slice of a global batch along dim 0."""
        if self.world_size == 1:
            return x
        n = x.shape[0]
        if n % self.world_size:
            raise ValueError(f"global batch {n} is not divisible by {self.world_size} processes")
        per = n // self.world_size
        return x[self.rank * per:(self.rank + 1) * per]

    def mean(self, value: float) -> float:
        if self.world_size == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item() / self.world_size)

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()


def init_from_env() -> DistContext:
    """Join the process group that ``torchrun`` describes in the environment, if any."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size())


def is_main_process() -> bool:
    """True outside ``torchrun`` and on its rank 0.  Reads ``RANK``, so it works before the group starts.

    Studies run on every rank (their training is data-parallel); only the main process writes files.
    """
    return int(os.environ.get("RANK", "0")) == 0


def sync() -> None:
    """Wait for every ``torchrun`` rank (e.g. until rank 0 has written a file the others read); no-op alone."""
    init_from_env().barrier()
