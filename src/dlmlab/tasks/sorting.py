"""Sorting: a completion task whose output tokens depend on each other.

Given random symbols, output them in ascending order (duplicates kept).  Which symbol belongs at
output position k depends on the whole multiset, and neighbouring outputs constrain each other (a
symbol is repeated exactly as often as it occurs), so committing several positions in parallel from
independent per-position marginals can produce a sequence that no single sort gives.  Layout and
scoring as in :mod:`dlmlab.tasks.completion`.
"""

from __future__ import annotations

import torch

from dlmlab.tasks.completion import CompletionVocab, pair, random_symbols


def sorting_pairs(batch: int, n: int, vocab: CompletionVocab,
                  gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt [B,n+1] = r + SEP, target [B,n+1] = sorted(r) + END) for random symbols r [B,n]."""
    r = random_symbols(batch, n, vocab, gen)
    return pair(r, r.sort(1).values, vocab)
