"""Writing files so that a reader never sees half of one (write a temp file, then rename over),
and JSON that is strict (no ``NaN`` / ``Infinity`` tokens, which strict JSON parsers reject).

The one temp-file-and-rename in the package is :func:`atomic_write`; :func:`atomic_write_text` and
:func:`atomic_write_bytes` are its two common cases.  Anything that writes through a library call
(``fig.savefig``, ``safetensors.save_file``, ``Tokenizer.save``) passes that call as the callback.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable


def temp_path(path: str | Path) -> Path:
    """The temp file :func:`atomic_write` fills before renaming it over ``path``: a hidden name beside it
    that holds the process id (two writers never share, and remove, one temp file) and ends with
    ``path``'s own suffix (libraries that pick a format by suffix, as ``savefig`` does, still work)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp{path.suffix}")


def atomic_write(path: str | Path, write: Callable[[Path], Any], fsync: bool = False) -> None:
    """Replace ``path`` in one step with what ``write(tmp)`` writes into the temp file ``tmp``.

    A crash leaves the old file or the new one, never a torn one; on any error the temp file is
    removed and the error raised.  ``fsync`` also flushes the file to disk before the rename.
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        write(tmp)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str, fsync: bool = False) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one step (:func:`atomic_write`)."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), fsync=fsync)


def atomic_write_bytes(path: str | Path, data: bytes, fsync: bool = False) -> None:
    """Replace ``path`` with ``data`` in one step (:func:`atomic_write`)."""
    atomic_write(path, lambda tmp: tmp.write_bytes(data), fsync=fsync)


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
