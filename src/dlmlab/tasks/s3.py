"""S3 word problem: compose permutations of 3 elements, label = prefix product.

The 6 elements of S3 are indexed in lexicographic order of their one-line
notation (``PERMS``).  ``labels[b, t]`` is the index of
``g_t o ... o g_1`` (apply ``g_1`` first).  S3 is non-abelian, so unlike parity the
state cannot be a sum of per-token contributions: the canonical hard prefix task.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from dlmlab.config import require

PERMS: list[tuple[int, int, int]] = list(itertools.permutations(range(3)))
_INDEX = {p: i for i, p in enumerate(PERMS)}


def compose(a: int, b: int) -> int:
    """Index of ``b o a`` (apply ``a`` first, then ``b``)."""
    pa, pb = PERMS[a], PERMS[b]
    return _INDEX[tuple(pb[pa[i]] for i in range(3))]


# MUL[state, g] = index of g o state
MUL = torch.tensor([[compose(s, g) for g in range(6)] for s in range(6)], dtype=torch.long)
IDENTITY = _INDEX[(0, 1, 2)]


@dataclass
class S3Task:
    """Uniform random group elements; ``vocab_size = n_classes = 6``."""

    name: str = "s3"
    vocab_size: int = 6
    n_classes: int = 6

    def sample(self, batch: int, length: int, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """-> tokens [B,T] long in [0,6), labels [B,T] long in [0,6)."""
        require(batch > 0 and length > 0, f"s3: batch and length must be > 0, got {batch}, {length}")
        tokens = torch.randint(0, 6, (batch, length), generator=gen)
        return tokens, self.labels(tokens)

    @staticmethod
    def labels(tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B,T] -> prefix products [B,T]."""
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) > 5):
            raise ValueError("s3 tokens must be in [0, 6)")
        B, T = tokens.shape
        out = torch.empty(B, T, dtype=torch.long)
        state = torch.full((B,), IDENTITY, dtype=torch.long)
        for t in range(T):
            state = MUL[state, tokens[:, t].long()]
            out[:, t] = state
        return out

    def corrupt(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """Replace the element at ``pos`` by a different one: every label from ``pos`` on changes."""
        out = tokens.clone()
        out[:, pos] = (out[:, pos] + 1 + (out[:, pos] * 7 + pos) % 5) % 6
        return out

    def corruptible(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """[B] bool: rows where :meth:`corrupt` at ``pos`` gives a valid input (every row)."""
        return torch.ones(tokens.shape[0], dtype=torch.bool)
