"""Names of the model zoo's entries -> their folders (``dlmlab.load("zoo:NAME")``); see :mod:`dlmlab.zoo`.

The entries are folders of ``src/dlmlab/zoo/models/`` (package data); this module only reads their ``zoo.json``,
so that loading needs nothing above the run-folder layer.
"""

from __future__ import annotations


import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

from dlmlab.errors import UserError

ROOT = Path(__file__).resolve().parents[1] / "zoo" / "models"
PREFIX = "zoo:"


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: ``zoo.json`` of its folder (see the module docstring)."""

    name: str
    description: str
    command: list[str]
    run: str  # the run folder, relative to the command's --out folder
    measure: str  # a function of dlmlab.zoo.measure
    commit: str = ""
    trained: str = ""
    wall_time_s: float | None = None
    shows: dict = field(default_factory=dict)
    eval: dict = field(default_factory=dict)  # what measure() needs besides the model (id range, lengths)

    @property
    def path(self) -> Path:
        return ROOT / self.name


def _read(folder: Path) -> ZooEntry:
    d = json.loads((folder / "zoo.json").read_text())
    known = set(ZooEntry.__dataclass_fields__)
    return ZooEntry(**{k: v for k, v in d.items() if k in known})


def entries() -> list[ZooEntry]:
    """Every exported entry, by name."""
    if not ROOT.is_dir():
        return []
    return [_read(p) for p in sorted(ROOT.iterdir()) if (p / "zoo.json").is_file()]


def entry(name: str) -> ZooEntry:
    """The entry called ``name``; an unknown name is a one-line error naming the closest ones."""
    names = [e.name for e in entries()]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UserError(f"no zoo model {name!r}{hint} (the zoo has: {', '.join(names) or 'nothing'}; "
                        "`dlmlab zoo` lists them)")
    return _read(ROOT / name)


def is_zoo(spec) -> bool:
    return isinstance(spec, str) and spec.startswith(PREFIX)


def resolve(spec: str) -> Path:
    """``"zoo:NAME"`` -> the entry's folder (which :func:`dlmlab.load` reads as a checkpoint folder)."""
    if not is_zoo(spec):
        raise ValueError(f"not a zoo name: {spec!r} (expected {PREFIX}NAME)")
    return entry(spec[len(PREFIX):]).path
