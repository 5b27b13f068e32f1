"""Prompt -> completion tasks with an end token, scored by exact match (decoding benchmarks).

A sequence is ``prompt body, SEP, completion body, END``: the model is given the prompt (body and
separator) and generates the completion followed by the end token.  Ids are laid out as

    [0, n_symbols) symbols | SEP | END | MASK        (model vocabulary = n_symbols + 3)

:func:`induction_pairs` is the induction task: random symbols whose completion repeats them (the
second half of a repeated sequence).  :mod:`dlmlab.tasks.sorting` is a task whose output tokens
depend on each other.  :func:`exact_match` scores a generated completion against the target up to
and including the target's first end token; :func:`tokens_to_end` counts generated tokens up to and
including a row's first end token (the useful part of a fixed-length canvas).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlmlab.config import require


@dataclass(frozen=True)
class CompletionVocab:
    """Ids ``[0, n_symbols)`` symbols, then the separator, the end token and the mask token."""

    n_symbols: int

    def __post_init__(self) -> None:
        require(self.n_symbols >= 2, f"n_symbols must be >= 2, got {self.n_symbols}")

    @property
    def sep(self) -> int:
        return self.n_symbols

    @property
    def end(self) -> int:
        return self.n_symbols + 1

    @property
    def mask_id(self) -> int:
        return self.n_symbols + 2

    @property
    def model_vocab(self) -> int:
        """Vocabulary size of a model that also has the mask token (= mask_id + 1)."""
        return self.n_symbols + 3


def pair(body: torch.Tensor, completion: torch.Tensor, vocab: CompletionVocab) -> tuple[torch.Tensor, torch.Tensor]:
    """body [B,n] and completion [B,m] symbols -> (prompt [B,n+1] = body + SEP, target [B,m+1] = completion + END)."""
    if body.dim() != 2 or completion.dim() != 2 or body.shape[0] != completion.shape[0]:
        raise ValueError(f"body and completion must be [B, n] and [B, m], got {tuple(body.shape)} and "
                         f"{tuple(completion.shape)}")
    B = body.shape[0]
    sep = torch.full((B, 1), vocab.sep, dtype=body.dtype)
    end = torch.full((B, 1), vocab.end, dtype=completion.dtype)
    return torch.cat([body, sep], 1), torch.cat([completion, end], 1)


def random_symbols(batch: int, n: int, vocab: CompletionVocab, gen: torch.Generator | None = None) -> torch.Tensor:
    """[batch, n] symbols drawn uniformly (with replacement) from ``[0, vocab.n_symbols)``."""
    if batch < 1 or n < 1:
        raise ValueError(f"batch and length must be >= 1, got {batch} and {n}")
    return torch.randint(0, vocab.n_symbols, (batch, n), generator=gen)


def induction_pairs(batch: int, n: int, vocab: CompletionVocab,
                    gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The induction task: (prompt [B,n+1] = r + SEP, target [B,n+1] = r + END) for random symbols r [B,n]."""
    r = random_symbols(batch, n, vocab, gen)
    return pair(r, r, vocab)


def tokens_to_end(generated: torch.Tensor, end_id: int) -> torch.Tensor:
    """generated [B,L] -> tokens up to and including each row's first ``end_id`` [B] (L where there is none)."""
    if generated.dim() != 2:
        raise ValueError(f"generated must be [B, L], got shape {tuple(generated.shape)}")
    L = generated.shape[1]
    hit = generated == end_id
    first = torch.where(hit.any(1), hit.float().argmax(1), torch.full((generated.shape[0],), L - 1))
    return first + 1


def exact_match(generated: torch.Tensor, target: torch.Tensor, end_id: int) -> torch.Tensor:
    """generated [B,L'] and target [B,L] (each row ending at its first ``end_id``) -> bool [B]: the generated
    tokens equal the target's up to and including the target's first end token (later tokens are ignored)."""
    if generated.dim() != 2 or target.dim() != 2 or generated.shape[0] != target.shape[0]:
        raise ValueError(f"generated and target must be [B, L'] and [B, L], got {tuple(generated.shape)} and "
                         f"{tuple(target.shape)}")
    n = tokens_to_end(target, end_id)
    L = int(n.max())
    if generated.shape[1] < L:
        pad = torch.full((generated.shape[0], L - generated.shape[1]), -1, dtype=generated.dtype)
        generated = torch.cat([generated, pad], 1)
    inside = torch.arange(L)[None] < n[:, None]
    same = (generated[:, :L] == target[:, :L]) | ~inside
    return same.all(1)
