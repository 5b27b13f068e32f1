"""Samples to rate, paired across methods: ``samples.jsonl`` lines ``{"prompt", "method", "sample"}``, or the
JSONL files ``dlmlab sample --out`` writes (lines ``{"prompt", "text", "config", ...}``; see
:func:`sample_cli_methods` for how their method names are made)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

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


def _is_sample_cli_row(row: dict) -> bool:
    """A line written by ``dlmlab sample --out``: prompt and generated ``text``, no ``sample`` / ``method``."""
    return "sample" not in row and "method" not in row and "text" in row and "prompt" in row


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


# what tells two `dlmlab sample` records' methods apart (per-sample outcomes such as steps are not)
_SAMPLE_CLI_FIELDS = ("objective", "family", "step", "kv_reuse", "cache", "config")  # cache: older files


def sample_cli_methods(rows: list[tuple[str, dict]], several_files: bool) -> list[str]:
    """Method names for ``dlmlab sample`` records ``(file name, record)``: the decoding settings (``config``,
    ``objective``, ``family``, ``step``, ``kv_reuse``) that every record has and whose values differ among them,
    as ``key=value`` joined by spaces; with several files the file name (without ``.jsonl``) comes first.  Records that
    differ in nothing get the file name, or ``sample`` for one file."""
    flats = [_flat({k: r[k] for k in _SAMPLE_CLI_FIELDS if k in r}) for _, r in rows]
    # settings every record has (an AR record's few settings against a diffusion record's many would otherwise
    # make every diffusion-only setting "differ", as None)
    keys = [k for k in dict.fromkeys(k for f in flats for k in f) if all(k in f for f in flats)]
    varying = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flats}) > 1]
    names = []
    for (name, _), f in zip(rows, flats):
        parts = [name] if several_files else []
        parts += [f"{k.removeprefix('config.')}={f.get(k)}" for k in varying]
        names.append(" ".join(parts) or "sample")
    return names


def _read_rows(path: Path) -> list[tuple[int, dict]]:
    from dlmlab.config import read_text

    out = []
    for i, raw in enumerate(read_text(path, "samples file", SamplesError).splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as e:
            raise SamplesError(f"{path} line {i}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise SamplesError(f"{path} line {i}: expected an object with prompt, method, sample "
                               "(or a line written by `dlmlab sample --out`)")
        out.append((i, row))
    return out


def load_samples(path: str | Path | list[str | Path]) -> list[Sample]:
    """Parse and validate one samples file or several (their samples together); errors name the file and
    line.  Each file holds rating lines ``{"prompt", "method", "sample"}`` or ``dlmlab sample --out`` lines
    (method names from :func:`sample_cli_methods`).  Exact duplicates are dropped."""
    paths = [Path(p) for p in path] if isinstance(path, (list, tuple)) else [Path(path)]
    several = len(paths) > 1
    rows: list[tuple[Path, int, dict]] = [(p, i, r) for p in paths for i, r in _read_rows(p)]
    cli = [(p, i, r) for p, i, r in rows if _is_sample_cli_row(r)]
    names = dict(zip([(p, i) for p, i, _ in cli],
                     sample_cli_methods([(p.name.removesuffix(".jsonl"), r) for p, _, r in cli], several)))
    out: list[Sample] = []
    seen: set[str] = set()
    for p, i, row in rows:
        if (p, i) in names:
            if not isinstance(row["prompt"], str) or not isinstance(row["text"], str):
                raise SamplesError(f"{p} line {i}: 'prompt' and 'text' must be strings")
            row = {"prompt": row["prompt"], "method": names[p, i], "sample": row["text"]}
        for k in ("prompt", "method", "sample"):
            if k not in row:
                raise SamplesError(f"{p} line {i}: missing key {k!r}")
            if not isinstance(row[k], str):
                raise SamplesError(f"{p} line {i}: {k!r} must be a string, got {type(row[k]).__name__}")
        if not row["method"].strip():
            raise SamplesError(f"{p} line {i}: empty method name")
        s = Sample(row["prompt"], row["method"], row["sample"], i)
        if s.key not in seen:
            seen.add(s.key)
            out.append(s)
    if not out:
        raise SamplesError(f"{', '.join(map(str, paths))} holds no samples")
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
