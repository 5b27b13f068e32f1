"""Samples to rate: ``samples.jsonl`` lines ``{"prompt", "method", "sample"}``, paired across methods."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from dlmlab.errors import UserError

SAMPLES_FILE = "samples.jsonl"


class SamplesError(UserError, ValueError):
    """A samples file that cannot be rated (bad JSON line, missing key, no pairs); names the file."""


class SamplesNotFound(UserError, FileNotFoundError):
    """No samples file where one was asked for."""


@dataclass(frozen=True)
class Sample:
    prompt: str
    method: str
    text: str
    line: int  # 1-based line in the file

    @property
    def key(self) -> str:
        return _digest(self.prompt, self.method, self.text)


@dataclass(frozen=True)
class Pair:
    """Two samples for the same prompt from different methods (stored order; shown in random order)."""

    a: Sample
    b: Sample

    @property
    def prompt(self) -> str:
        return self.a.prompt

    @property
    def key(self) -> str:
        return _digest(self.a.prompt, *sorted([self.a.key, self.b.key]))

    @property
    def methods(self) -> tuple[str, str]:
        return tuple(sorted([self.a.method, self.b.method]))  # type: ignore[return-value]


def _digest(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode("utf-8")).hexdigest()[:20]


def find_samples(path: str | Path) -> Path:
    """``path`` itself if it is a file, else ``path/samples.jsonl``, else the single ``path/*/samples.jsonl``."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise SamplesNotFound(f"{path} does not exist")
    if (path / SAMPLES_FILE).is_file():
        return path / SAMPLES_FILE
    found = sorted(path.glob(f"*/{SAMPLES_FILE}"))
    if len(found) == 1:
        return found[0]
    hint = f"; found several: {', '.join(map(str, found))} (pass one folder)" if found else ""
    raise SamplesNotFound(f"no {SAMPLES_FILE} in {path}{hint}")


def load_samples(path: str | Path) -> list[Sample]:
    """Parse and validate ``samples.jsonl``; errors name the line.  Exact duplicates are dropped."""
    path = Path(path)
    out: list[Sample] = []
    seen: set[str] = set()
    from dlmlab.config import read_text

    for i, raw in enumerate(read_text(path, "samples file", SamplesError).splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as e:
            raise SamplesError(f"{path} line {i}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise SamplesError(f"{path} line {i}: expected an object with prompt, method, sample")
        for k in ("prompt", "method", "sample"):
            if k not in row:
                raise SamplesError(f"{path} line {i}: missing key {k!r}")
            if not isinstance(row[k], str):
                raise SamplesError(f"{path} line {i}: {k!r} must be a string, got {type(row[k]).__name__}")
        if not row["method"].strip():
            raise SamplesError(f"{path} line {i}: empty method name")
        s = Sample(row["prompt"], row["method"], row["sample"], i)
        if s.key not in seen:
            seen.add(s.key)
            out.append(s)
    if not out:
        raise SamplesError(f"{path} holds no samples")
    return out


def all_pairs(samples: list[Sample]) -> list[Pair]:
    """Every pair of samples that share a prompt and come from different methods."""
    by_prompt: dict[str, list[Sample]] = {}
    for s in samples:
        by_prompt.setdefault(s.prompt, []).append(s)
    pairs = [Pair(x, y) for group in by_prompt.values() for x, y in combinations(group, 2) if x.method != y.method]
    if not pairs:
        raise SamplesError("no prompt has samples from two different methods: nothing to compare")
    return pairs
