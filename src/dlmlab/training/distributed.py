"""Data-parallel helpers for ``torchrun`` (gloo on CPU, nccl on GPU)."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Callable, TypeVar

import torch
import torch.distributed as dist

from dlmlab.errors import UserError
from dlmlab.ranks import is_main_process  # noqa: F401 -- re-exported (the base module is dlmlab.ranks)

T = TypeVar("T")


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
            raise UserError(f"train.batch_size (the global batch) {n} is not divisible by {self.world_size} "
                            f"processes; choose a multiple of {self.world_size}")
        per = n // self.world_size
        return x[self.rank * per:(self.rank + 1) * per]

    def _tensor(self, value: float) -> torch.Tensor:
        # nccl reduces CUDA tensors only
        on_gpu = dist.get_backend() == "nccl"
        device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        return torch.tensor([value], dtype=torch.float64, device=device)

    def mean(self, value: float) -> float:
        if self.world_size == 1:
            return value
        t = self._tensor(value)
        dist.all_reduce(t)
        return float(t.item() / self.world_size)

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on some rank (so all ranks take the same branch)."""
        if self.world_size == 1:
            return bool(flag)
        t = self._tensor(1.0 if flag else 0.0)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def from_main(self, make: Callable[[], T]) -> T:
        """``make()`` run on rank 0 only, its result sent to every rank; an exception it raises (or a result that
        cannot be pickled) is raised on every rank, so no rank waits for a result that never comes."""
        if self.world_size == 1:
            return make()
        box: list = [None]
        if self.is_main:
            try:
                value = make()
                pickle.dumps(value)
                box = [(True, value)]
            except Exception as e:  # noqa: BLE001 -- re-raised below, on every rank
                box = [(False, e if _picklable(e) else RuntimeError(f"{type(e).__name__}: {e}"))]
        dist.broadcast_object_list(box, src=0)
        ok, value = box[0]
        if not ok:
            raise value
        return value


def _picklable(x) -> bool:
    try:
        pickle.dumps(x)
        return True
    except Exception:  # noqa: BLE001
        return False


def init_from_env() -> DistContext:
    """Join the process group that ``torchrun`` describes in the environment, if any."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":  # one GPU per rank (else every rank lands on cuda:0)
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size())


def sync() -> None:
    """Wait for every ``torchrun`` rank (e.g. until rank 0 has written a file the others read); no-op alone."""
    init_from_env().barrier()


def gathered(t: torch.Tensor) -> torch.Tensor:
    """A DTensor (an FSDP-sharded parameter, a gradient norm over shards) gathered whole, a collective; any
    other tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def local_part(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor; any other tensor as it is."""
    return t.to_local() if hasattr(t, "to_local") else t
