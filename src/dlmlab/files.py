"""Writing files so that a reader never sees half of one (write a temp file, then rename over)."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step: a crash leaves the old file or the new one, never a torn one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
