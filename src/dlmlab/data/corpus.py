"""Natural-text corpora for the studies: one text, JSONL or Parquet file, a folder of them, or several.

``read_corpus(spec)`` -> :class:`CorpusText` (the text and the files it came from).  ``spec`` is

* a named offline corpus of :mod:`dlmlab.data.paths` (``tinyshakespeare``, ``wikitext2-valid``, ...);
* a path to a ``.txt`` file (read whole), a ``.jsonl`` / ``.json`` file (one JSON object per line, its
  ``text_field`` taken), a ``.parquet`` file (its ``text_field`` column, read with pyarrow), or a folder
  (every such file below it, in sorted order);
* ``$NAME``: the path held by the environment variable NAME (e.g. ``$DLMLAB_FINEWEB`` for a local
  FineWeb-Edu sample);
* several of these joined by ``+`` (``wikitext2-valid+tinyshakespeare``), concatenated in that order;
* alternatives joined by ``|`` (``$DLMLAB_FINEWEB|wikitext2-valid+tinyshakespeare``): the first whose
  parts all exist (:func:`resolve_spec`).

Documents are joined with ``separator`` (a blank line).  ``max_chars`` stops reading once that many
characters are collected (a large local sample need not be read whole).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dlmlab.data.paths import NAMED, DataError, DataNotFound, resolve_text
from dlmlab.data.tokenizer import TextTokenizer, train_tokenizer

SUFFIXES = (".txt", ".jsonl", ".json", ".parquet")


@dataclass
class CorpusText:
    text: str
    files: list[str] = field(default_factory=list)


def _resolve(part: str) -> Path:
    if part.startswith("$"):
        val = os.environ.get(part[1:], "").strip()
        if not val:
            raise DataNotFound(f"environment variable {part[1:]} (corpus {part!r}) is not set")
        part = val
    if part in NAMED:
        return resolve_text(part)
    p = Path(part).expanduser()
    if not p.exists():
        raise DataNotFound(f"corpus {part!r} is neither a known corpus {sorted(NAMED)} nor an existing path")
    return p


def _files(p: Path) -> list[Path]:
    if p.is_file():
        return [p]
    found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in SUFFIXES)
    if not found:
        raise DataNotFound(f"no {'/'.join(SUFFIXES)} files under {p}")
    return found


def _documents(f: Path, text_field: str):
    suf = f.suffix.lower()
    try:
        if suf == ".parquet":
            import pyarrow
            import pyarrow.parquet as pq

            try:
                pf = pq.ParquetFile(f)
            except pyarrow.ArrowInvalid as e:
                raise DataError(f"{f}: not a readable Parquet file ({e})") from None
            if text_field not in pf.schema_arrow.names:
                raise DataError(f"{f}: no column {text_field!r} (columns: {pf.schema_arrow.names})")
            for batch in pf.iter_batches(columns=[text_field]):
                yield from (t for t in batch.column(0).to_pylist() if t)
        elif suf in (".jsonl", ".json"):
            with f.open(encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    if line.strip():
                        try:
                            doc = json.loads(line)
                        except json.JSONDecodeError as e:
                            raise DataError(f"{f}: line {n} is not valid JSON ({e.msg})") from None
                        if not isinstance(doc, dict) or text_field not in doc:
                            raise DataError(f"{f}: line {n} has no field {text_field!r}")
                        yield doc[text_field]
        else:
            yield f.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{f}: not UTF-8 text (byte {e.start}); convert it to UTF-8") from None
    except OSError as e:
        raise DataError(f"{f}: cannot be read ({e.strerror or e})") from None


def resolve_spec(spec: str) -> str:
    """The first ``|``-alternative of ``spec`` whose ``+``-parts all resolve (else the last one's error)."""
    alts = [a.strip() for a in spec.split("|")]
    for i, alt in enumerate(alts):
        try:
            for part in alt.split("+"):
                _resolve(part.strip())
            return alt
        except DataNotFound:
            if i == len(alts) - 1:
                raise
    raise ValueError(f"empty corpus spec {spec!r}")


def read_corpus(spec: str, text_field: str = "text", max_chars: int | None = None,
                separator: str = "\n\n") -> CorpusText:
    """The text of ``spec`` (see the module docstring), at most ``max_chars`` characters."""
    if not spec:
        raise ValueError("empty corpus spec")
    if max_chars is not None and max_chars <= 0:
        raise ValueError(f"max_chars must be > 0, got {max_chars}")
    parts, files, n = [], [], 0
    for part in resolve_spec(spec).split("+"):
        for f in _files(_resolve(part.strip())):
            files.append(str(f))
            for doc in _documents(f, text_field):
                parts.append(doc)
                n += len(doc) + len(separator)
                if max_chars is not None and n >= max_chars:
                    return CorpusText(separator.join(parts)[:max_chars], files)
    return CorpusText(separator.join(parts), files)


@dataclass
class CorpusIds:
    """A tokenised corpus: train / held-out ids [N] split by position (``val_fraction`` at the end)."""

    train: torch.Tensor
    val: torch.Tensor
    tokenizer: TextTokenizer
    files: list[str]

    @property
    def n_tokens(self) -> int:
        return len(self.train) + len(self.val)


def tokenise_corpus(spec: str, tokenizer: str = "char", bpe_vocab: int = 1024, val_fraction: float = 0.1,
                    max_chars: int | None = None, text_field: str = "text") -> CorpusIds:
    """Read ``spec``, train the tokenizer, encode -> :class:`CorpusIds`.

    A BPE tokenizer is trained on the train part only; a char tokenizer on the whole text (its
    alphabet, so that a rare character of the held-out part still has an id).
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    c = read_corpus(spec, text_field=text_field, max_chars=max_chars)
    cut = int(len(c.text) * (1 - val_fraction))
    tok = train_tokenizer(tokenizer, c.text if tokenizer == "char" else c.text[:cut], bpe_vocab)
    train = torch.tensor(tok.encode(c.text[:cut]), dtype=torch.long)
    val = torch.tensor(tok.encode(c.text[cut:]), dtype=torch.long)
    return CorpusIds(train, val, tok, c.files)
