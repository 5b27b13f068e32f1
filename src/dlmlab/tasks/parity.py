"""Parity: bits in, running XOR out (a label per position).

``tokens[b, t]`` in {0, 1}; ``labels[b, t] = tokens[b, :t+1].sum() % 2``.
The state is one bit that every token may flip: a prefix (scan) task.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlmlab.config import require


@dataclass
class ParityTask:
    """Uniform random bits; ``vocab_size = n_classes = 2``."""

    name: str = "parity"
    vocab_size: int = 2
    n_classes: int = 2

    def sample(self, batch: int, length: int, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """-> tokens [B,T] long, labels [B,T] long."""
        require(batch > 0 and length > 0, f"parity: batch and length must be > 0, got {batch}, {length}")
        tokens = torch.randint(0, 2, (batch, length), generator=gen)
        return tokens, self.labels(tokens)

    @staticmethod
    def labels(tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B,T] in {0,1} -> running parity [B,T]."""
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) > 1):
            raise ValueError("parity tokens must be 0 or 1")
        return tokens.long().cumsum(-1) % 2

    def corrupt(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """Flip the bit at ``pos``: every label from ``pos`` on flips."""
        out = tokens.clone()
        out[:, pos] = 1 - out[:, pos]
        return out

    def corruptible(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """[B] bool: rows where :meth:`corrupt` at ``pos`` gives a valid input (every row)."""
        return torch.ones(tokens.shape[0], dtype=torch.bool)
