"""Language-model data: a token stream split into train/val, random windows as batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dlmlab.config import Config, read_text, require
from dlmlab.data.paths import DataError, resolve_text
from dlmlab.data.tokenizer import TextTokenizer, train_tokenizer


@dataclass
class DataConfig(Config):
    """``source``: a named offline corpus (tinyshakespeare, wikitext2-valid, wikitext2-test) or a text file path."""

    source: str = "tinyshakespeare"
    tokenizer: Literal["char", "bpe"] = "char"
    bpe_vocab: int = 1024
    seq_len: int = 128
    val_fraction: float = 0.1

    def validate(self) -> None:
        require(self.seq_len > 1, f"data.seq_len must be > 1, got {self.seq_len}")
        require(0 < self.val_fraction < 1, f"data.val_fraction must be in (0, 1), got {self.val_fraction}")
        require(self.bpe_vocab >= 260, f"data.bpe_vocab must be >= 260, got {self.bpe_vocab}")


class TokenStream:
    """ids [N] of one corpus with a fixed train/val split at ``1 - val_fraction``."""

    def __init__(self, ids: torch.Tensor, val_fraction: float) -> None:
        cut = int(len(ids) * (1 - val_fraction))
        self.train, self.val = ids[:cut], ids[cut:]

    @staticmethod
    def windows(ids: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
        """``batch`` random windows [B, seq_len] of ``ids``."""
        if len(ids) <= seq_len:
            raise ValueError(f"corpus of {len(ids)} tokens is too short for seq_len {seq_len}")
        starts = torch.randint(0, len(ids) - seq_len, (batch,), generator=gen)
        return torch.stack([ids[s:s + seq_len] for s in starts.tolist()])

    @staticmethod
    def chunks(ids: torch.Tensor, seq_len: int, limit: int | None = None) -> torch.Tensor:
        """Consecutive non-overlapping windows [N, seq_len] (deterministic evaluation)."""
        n = len(ids) // seq_len
        if limit is not None:
            n = min(n, limit)
        return ids[: n * seq_len].view(n, seq_len)


def load_corpus(cfg: DataConfig, tokenizer: TextTokenizer | None = None) -> tuple[TokenStream, TextTokenizer]:
    """Read ``cfg.source``, fit a tokenizer unless one is given, encode.

    A char tokenizer is fit on the whole text (it encodes all of it, so a character that occurs only
    in the validation part must be in its vocabulary); a BPE tokenizer on the train split (its byte-level
    alphabet encodes any text).  A missing, empty, non-UTF-8 or too short source, or a text with
    characters a given char tokenizer lacks, raises :class:`~dlmlab.data.paths.DataNotFound` /
    :class:`DataError` naming the file.
    """
    path = resolve_text(cfg.source)
    text = read_text(path, "data source", DataError)
    if not text:
        raise DataError(f"data source {path} is empty; give a text file with the training text")
    if tokenizer is None:
        cut = int(len(text) * (1 - cfg.val_fraction))
        tokenizer = train_tokenizer(cfg.tokenizer, text if cfg.tokenizer == "char" else text[:cut], cfg.bpe_vocab)
    else:
        known = getattr(tokenizer, "index", None)  # a char tokenizer's vocabulary
        if known is not None:
            missing = sorted(set(text) - set(known))
            if missing:
                shown = "".join(missing[:20]) + ("..." if len(missing) > 20 else "")
                raise DataError(f"data source {path} has {len(missing)} character(s) this run's char tokenizer "
                                f"never saw ({shown!r}); evaluate on text with the training characters only")
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    stream = TokenStream(ids, cfg.val_fraction)
    need = cfg.seq_len + 1
    if len(stream.train) <= need or len(stream.val) < need:
        raise DataError(
            f"data source {path} is too short: its {len(ids)} tokens split into {len(stream.train)} for training "
            f"and {len(stream.val)} for validation, and data.seq_len {cfg.seq_len} needs at least {need + 1} and "
            f"{need}; use more text, a smaller data.seq_len or another data.val_fraction")
    return stream, tokenizer
