"""Writing files so that a reader never sees half of one (write a temp file, then rename over),
and JSON that is strict (no ``NaN`` / ``Infinity`` tokens, which strict JSON parsers reject)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step: a crash leaves the old file or the new one, never a torn one.

    The temp file's name holds the process id, so two writers never share (and remove) one temp file.
    """
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def finite_or_none(obj: Any) -> Any:
    """``obj`` with every NaN / +-inf float (also inside dicts, lists, tuples) replaced by ``None``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj


def strict_json(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that writes ``null`` for NaN / inf, so every JSON parser reads the result."""
    return json.dumps(finite_or_none(obj), allow_nan=False, **kwargs)
