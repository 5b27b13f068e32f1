"""What each claim answers to: the sentence of a study summary it tests (``FILE:LINE``), in our own words.

The four study summaries the project was started from (``../shared/seeds/``, see its README) are the
specification of ``dlmlab reproduce``.  Every claim carries a :class:`SeedRef`:

* ``ref``: the summary's file and 1-based line, ``"000_53ecdc8713c33aa0.txt:37"`` (``None`` for an extension);
* ``says``: what that line states, in English, in the project's own words (never the summary's wording);
* ``study_effect``: the summary's number for the claim's quantity where it gives one (a float, or a small dict
  of named floats, e.g. ``{"hybrid": 28.7, "diffugpt": 42.8}``), else ``None``;
* ``deviation``: one line where the claim's quantity, comparison or level differs from the sentence, and why;
* ``extension``: the claim tests something no summary states; it is reported in its own section and not
  counted in its study's tally.

:func:`with_seeds` attaches the references to a study's claims (every claim must have one), and
:func:`check_ref` resolves a reference against the summaries (used by the tests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

REF_RE = re.compile(r"^(\d{3}_[0-9a-f]{16}\.txt):([1-9]\d*)$")
#: file name -> study, as ../shared/seeds/README.md lists them
SEED_FILES = {
    "000_53ecdc8713c33aa0.txt": "induction",
    "004_2fd602b4a1c5134e.txt": "induction",
    "001_cf7bd1bfa26dc6e7.txt": "reversal",
    "002_954919acf31821b2.txt": "state",
    "003_59f6a69613976956.txt": "prediff",
}


def _check_effect(value: Any, where: str) -> None:
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return
    if isinstance(value, dict) and value and all(isinstance(k, str) and isinstance(v, (int, float))
                                                 and not isinstance(v, bool) for k, v in value.items()):
        return
    raise ValueError(f"{where}: study_effect must be a number, a dict of named numbers or None, got {value!r}")


@dataclass(frozen=True)
class SeedRef:
    """The summary sentence a claim tests (see the module docstring)."""

    ref: str | None
    says: str
    study_effect: float | dict[str, float] | None = None
    deviation: str | None = None
    extension: bool = False

    def __post_init__(self):
        if not isinstance(self.says, str) or len(self.says.strip()) < 10:
            raise ValueError(f"seed reference {self.ref!r}: 'says' must state the sentence in a few words")
        if self.extension:
            if self.ref is not None:
                raise ValueError("an extension tests no summary sentence: its ref must be None")
        else:
            m = REF_RE.match(self.ref or "")
            if not m or m.group(1) not in SEED_FILES:
                raise ValueError(f"seed reference {self.ref!r} is not FILE:LINE of a study summary "
                                 f"({', '.join(SEED_FILES)})")
        if self.deviation is not None and (not isinstance(self.deviation, str) or "\n" in self.deviation
                                           or not self.deviation.strip()):
            raise ValueError(f"seed reference {self.ref!r}: deviation must be one non-empty line")
        _check_effect(self.study_effect, f"seed reference {self.ref!r}")

    @property
    def file(self) -> str | None:
        return None if self.ref is None else self.ref.split(":")[0]

    @property
    def line(self) -> int | None:
        return None if self.ref is None else int(self.ref.split(":")[1])


def with_seeds(claims: Iterable, refs: dict[str, SeedRef]) -> list:
    """``claims`` (:class:`~dlmlab.report.claims.Claim`) with their seed fields set from ``refs`` (claim id ->
    :class:`SeedRef`); a claim without a reference is an error naming it."""
    out = []
    for c in claims:
        if c.id not in refs:
            raise KeyError(f"claim {c.id!r} cites no summary sentence: add it to its study's SEED_REFS")
        s = refs[c.id]
        out.append(replace(c, seed_ref=s.ref, seed_says=s.says, study_effect=s.study_effect,
                           deviation=s.deviation, extension=s.extension))
    return out


def seeds_dir(start: Path | None = None) -> Path | None:
    """``../shared/seeds`` beside the checkout (or ``$DLMLAB_SEEDS``); None when absent."""
    import os

    env = os.environ.get("DLMLAB_SEEDS")
    if env:
        return Path(env) if Path(env).is_dir() else None
    here = (start or Path(__file__)).resolve()
    for parent in here.parents:
        cand = parent / "shared" / "seeds"
        if cand.is_dir():
            return cand
    return None


def check_ref(ref: SeedRef, root: Path) -> str:
    """The summary line ``ref`` points at (stripped); an error when the file or a non-empty line is missing."""
    if ref.extension:
        raise ValueError("an extension has no summary line")
    path = root / ref.file
    lines = path.read_text(encoding="utf-8").splitlines()
    if not 1 <= ref.line <= len(lines) or not lines[ref.line - 1].strip():
        raise ValueError(f"{ref.ref}: no such non-empty line ({len(lines)} lines in {ref.file})")
    return lines[ref.line - 1].strip()


def study_effect_text(effect: Any) -> str:
    """``26.9`` / ``hybrid 28.7, diffugpt 42.8`` / ``-`` (display only)."""
    if effect is None:
        return "-"
    if isinstance(effect, dict):
        return ", ".join(f"{k} {v:g}" for k, v in effect.items())
    return f"{effect:g}"
