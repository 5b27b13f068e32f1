"""Where the offline data lives: ``$DLMLAB_DATA`` or ``../shared/data`` beside the project."""

from __future__ import annotations

import os
from pathlib import Path
from dlmlab.errors import UserError


class DataError(UserError):
    """A data source that cannot be used: empty, not UTF-8, a directory, too short."""


class DataNotFound(DataError, FileNotFoundError):
    """A named corpus, the offline data folder or a data file that does not exist."""


def data_root() -> Path:
    """The offline data folder; raises :class:`DataNotFound` with what was tried."""
    env = os.environ.get("DLMLAB_DATA")
    tried = []
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    for base in [Path.cwd(), *Path.cwd().parents, *here.parents]:
        candidates.append(base / "shared" / "data")
        candidates.append(base.parent / "shared" / "data")
    for c in candidates:
        tried.append(str(c))
        if (c / "README.md").exists() or (c / "tinyshakespeare").exists():
            return c
    raise DataNotFound(
        "offline data not found; set DLMLAB_DATA to the folder holding tinyshakespeare/, wikitext-2/, "
        f"reversal_curse/ (tried {tried[:4]} ...)"
    )


NAMED = {
    "tinyshakespeare": "tinyshakespeare/input.txt",
    "wikitext2-valid": "wikitext-2/valid.txt",
    "wikitext2-test": "wikitext-2/test.txt",
}


def resolve_text(source: str) -> Path:
    """A named offline corpus (``tinyshakespeare``, ``wikitext2-valid``...) or a path to a text file."""
    if source in NAMED:
        p = data_root() / NAMED[source]
        if not p.is_file():
            raise DataNotFound(f"corpus {source!r} is missing from the offline data: no file {p}")
        return p
    p = Path(source)
    if not p.exists():
        raise DataNotFound(f"text source {source!r} is neither a known corpus {sorted(NAMED)} nor an existing file")
    if p.is_dir():
        raise DataError(f"text source {source!r} is a directory; give a text file (or one of {sorted(NAMED)})")
    return p
