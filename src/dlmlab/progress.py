"""Progress bars (tqdm) that stay on their own terminal line inside worker processes.

In the main process :func:`bar` is plain ``tqdm``.  A worker of :func:`dlmlab.studies.parallel.map_jobs`
calls :func:`set_worker_line` once; from then on every bar it opens is drawn on that line (below the
main process's bars), so the bars of several workers do not overwrite each other.
"""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm

_line: int | None = None


def set_worker_line(line: int) -> None:
    """Draw this process's bars on terminal line ``line`` (>= 0) from now on."""
    global _line
    if line < 0:
        raise ValueError(f"line must be >= 0, got {line}")
    _line = line


def bar(*args: Any, **kwargs: Any) -> tqdm:
    """``tqdm(*args, **kwargs)``; in a worker, pinned to the worker's line and cleared when done."""
    if _line is not None:
        kwargs["position"] = _line
        kwargs["leave"] = False
    return tqdm(*args, **kwargs)
