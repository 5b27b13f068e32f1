"""Language-model data: a token stream split into train/val, random windows as batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dlmlab.config import require
from dlmlab.data.paths import resolve_text
from dlmlab.data.tokenizer import TextTokenizer, train_tokenizer


@dataclass
class DataConfig:
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
    """Read ``cfg.source``, train a tokenizer on its train split unless one is given, encode."""
    text = resolve_text(cfg.source).read_text(encoding="utf-8")
    cut = int(len(text) * (1 - cfg.val_fraction))
    tok = tokenizer or train_tokenizer(cfg.tokenizer, text[:cut], cfg.bpe_vocab)
    ids = torch.tensor(tok.encode(text), dtype=torch.long)
    return TokenStream(ids, cfg.val_fraction), tok
