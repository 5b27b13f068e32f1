"""Which ``torchrun`` process this is, from the environment alone (no process group, no torch import).

A base module: :mod:`dlmlab.report` uses it to write files on the main process only without importing
:mod:`dlmlab.training`; :mod:`dlmlab.training.distributed` re-exports it.
"""

from __future__ import annotations

import os


def is_main_process() -> bool:
    """True outside ``torchrun`` and on its rank 0.  Reads ``RANK``, so it works before the group starts.

    Studies run on every rank (their training is data-parallel); only the main process writes files.
    """
    return int(os.environ.get("RANK", "0")) == 0


__all__ = ["is_main_process"]
