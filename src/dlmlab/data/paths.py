"""Where the offline data lives: ``$DLMLAB_DATA`` (checked: a wrong one is a one-line error) or
``../shared/data`` beside the project."""

from __future__ import annotations

import os
from pathlib import Path
from dlmlab.errors import UserError


class DataError(UserError):
    """A data source that cannot be used: empty, not UTF-8, a directory, too short."""


class DataNotFound(DataError, FileNotFoundError):
    """A named corpus, the offline data folder or a data file that does not exist."""


def _is_data_folder(p: Path) -> bool:
    return (p / "README.md").exists() or (p / "tinyshakespeare").exists()


def data_root() -> Path:
    """The offline data folder: ``$DLMLAB_DATA`` when set (a wrong one is an error, never skipped), else the
    first ``shared/data`` above the working directory or the package; raises :class:`DataNotFound`."""
    env = os.environ.get("DLMLAB_DATA")
    if env:
        p = Path(env).expanduser()
        if not p.exists():
            why = "does not exist"
        elif not p.is_dir():
            why = "is a file, not a folder"
        elif not _is_data_folder(p):
            why = "is not the offline data folder (it has no README.md and no tinyshakespeare/)"
        else:
            return p
        raise DataNotFound(f"DLMLAB_DATA={env} {why}; point DLMLAB_DATA at the folder holding tinyshakespeare/, "
                           "wikitext-2/, reversal_curse/ (or unset it to use shared/data beside the project)")
    tried = []
    here = Path(__file__).resolve()
    for base in [Path.cwd(), *Path.cwd().parents, *here.parents]:
        for c in (base / "shared" / "data", base.parent / "shared" / "data"):
            tried.append(str(c))
            if _is_data_folder(c):
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
