"""CPU thread count for a study's models: the same on every machine.

A CPU kernel's floating-point result depends on how many torch threads split its reductions (a
matrix product on 1 and on 2 threads differs in the last bits, and training amplifies that), so a
study's numbers must not use a thread count read from the machine.  Studies train on
``STUDY_THREADS`` threads whatever the core count (more cores run more worker processes instead).
One thread is also the fastest for the studies' tiny models: extra threads only add
synchronisation, and on a shared or oversubscribed machine they spin and slow everything down.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

STUDY_THREADS = 1


def threads_for(d_model: int) -> int:
    """Torch CPU threads for training a model of width ``d_model``: ``STUDY_THREADS`` for every width, never
    a count read from the machine (0, "use the cores", would make results depend on the machine)."""
    if d_model < 1:
        raise ValueError(f"d_model must be >= 1, got {d_model}")
    return STUDY_THREADS


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch CPU threads (0 = unchanged); the previous count is restored after."""
    if n < 0:
        raise ValueError(f"thread count must be >= 0, got {n}")
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
