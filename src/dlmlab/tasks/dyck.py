"""Dyck-k prefixes with bounded depth; label = current nesting depth (a counter task).

Token ``2*j`` opens bracket type ``j`` and ``2*j + 1`` closes it.  Sequences are
random walks: at depth 0 the next token opens, at ``max_depth`` it closes, otherwise
it opens with probability ``p_open``; a close always matches the innermost open.
``labels[b, t]`` is the depth *after* token t (``0..max_depth``, so
``n_classes = max_depth + 1``).  Prefixes need not be balanced at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlmlab.config import require


@dataclass
class DyckTask:
    k: int = 2
    max_depth: int = 10
    p_open: float = 0.5
    name: str = "dyck"

    def __post_init__(self) -> None:
        require(self.k >= 1, f"dyck.k must be >= 1, got {self.k}")
        require(self.max_depth >= 1, f"dyck.max_depth must be >= 1, got {self.max_depth}")
        require(0 < self.p_open < 1, f"dyck.p_open must be in (0, 1), got {self.p_open}")

    @property
    def vocab_size(self) -> int:
        return 2 * self.k

    @property
    def n_classes(self) -> int:
        return self.max_depth + 1

    def sample(self, batch: int, length: int, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """-> tokens [B,T] long in [0, 2k), labels [B,T] long in [0, max_depth]."""
        require(batch > 0 and length > 0, f"dyck: batch and length must be > 0, got {batch}, {length}")
        u = torch.rand(batch, length, generator=gen)
        types = torch.randint(0, self.k, (batch, length), generator=gen)
        stack = torch.zeros(batch, self.max_depth + 1, dtype=torch.long)
        depth = torch.zeros(batch, dtype=torch.long)
        rows = torch.arange(batch)
        tokens = torch.empty(batch, length, dtype=torch.long)
        labels = torch.empty(batch, length, dtype=torch.long)
        for t in range(length):
            opens = (depth == 0) | ((depth < self.max_depth) & (u[:, t] < self.p_open))
            top = stack[rows, (depth - 1).clamp(min=0)]
            tokens[:, t] = torch.where(opens, 2 * types[:, t], 2 * top + 1)
            stack[rows, depth.clamp(max=self.max_depth)] = torch.where(opens, types[:, t], stack[rows, depth.clamp(max=self.max_depth)])
            depth = depth + torch.where(opens, 1, -1)
            labels[:, t] = depth
        return tokens, labels

    def labels(self, tokens: torch.Tensor) -> torch.Tensor:
        """Depth after each token of a valid Dyck prefix [B,T] -> [B,T]; raises on an invalid one."""
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"dyck tokens must be in [0, {self.vocab_size})")
        depth = (1 - 2 * (tokens % 2)).cumsum(-1)
        if tokens.numel() and (int(depth.min()) < 0 or int(depth.max()) > self.max_depth):
            raise ValueError(f"not a Dyck prefix with depth in [0, {self.max_depth}]")
        return depth

    def corrupt(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """Flip the bracket at ``pos`` between opening and closing (same type): every depth from ``pos``
        on moves by 2.  The result may close a bracket of another type than the innermost open one; the
        label (the depth) is a count that ignores types.  Rows where a depth leaves ``[0, max_depth]``
        are invalid (see :meth:`corruptible`)."""
        out = tokens.clone()
        out[:, pos] = out[:, pos] ^ 1  # 2j <-> 2j + 1
        return out

    def corruptible(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """[B] bool: rows whose corrupted depths all stay in ``[0, max_depth]``."""
        depth = (1 - 2 * (self.corrupt(tokens, pos) % 2)).cumsum(-1)
        return (depth.min(-1).values >= 0) & (depth.max(-1).values <= self.max_depth)
