"""CPU thread count for a study's small models.

Tiny models (d_model <= ``SMALL_D_MODEL``) run fastest on one torch thread: extra threads only add
synchronisation, and on a shared or oversubscribed machine they spin and slow everything down.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

SMALL_D_MODEL = 128


def threads_for(d_model: int) -> int:
    """1 thread for a small model, else 0 (= keep torch's current setting)."""
    return 1 if d_model <= SMALL_D_MODEL else 0


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
