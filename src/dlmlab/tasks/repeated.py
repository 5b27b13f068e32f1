"""Repeated-random-token sequences (the induction task), optionally mixed with natural text.

A repeated sequence of length ``2 * half`` is ``r_0 .. r_{half-1} r_0 .. r_{half-1}`` with
the ``r_i`` drawn uniformly from the id range ``[lo, hi)``.  The study gives the random
tokens their own id range placed after the text vocabulary, so that the model
vocabulary is ``[text ids | random ids | mask]``:

    vocab = RepeatedVocab(text_vocab=65, n_random=128)   # ids 65..192 random, 193 = mask

:func:`embedded_repeats` varies the repeated segment's length and start so that the copy offset
is not fixed (otherwise one attention layer can copy from a fixed relative position with learned
positions, which is not induction).  :func:`mixed_batch` draws a batch whose rows are such
sequences with probability ``p_repeated`` and windows of a natural-text token stream otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlmlab.config import require


@dataclass
class RepeatedVocab:
    """Id layout ``[0, text_vocab)`` text, ``[text_vocab, text_vocab + n_random)`` random tokens, then mask."""

    text_vocab: int
    n_random: int

    def validate(self) -> None:
        require(self.text_vocab >= 0, f"text_vocab must be >= 0, got {self.text_vocab}")
        require(self.n_random >= 2, f"n_random must be >= 2, got {self.n_random}")

    @property
    def lo(self) -> int:
        return self.text_vocab

    @property
    def hi(self) -> int:
        return self.text_vocab + self.n_random

    @property
    def mask_id(self) -> int:
        return self.hi

    @property
    def model_vocab(self) -> int:
        """Vocabulary size of a model that also has a mask token (= mask_id + 1)."""
        return self.hi + 1


def repeated_tokens(batch: int, half: int, lo: int, hi: int, gen: torch.Generator | None = None,
                    distinct: bool = False) -> torch.Tensor:
    """[batch, 2*half] sequences whose first half (uniform ids in [lo, hi)) repeats as the second half.

    ``distinct=True`` draws the ``half`` tokens of a row without replacement (needs ``hi - lo >= half``),
    which removes ambiguous induction targets (a token occurring twice in the first half).
    """
    if half < 1:
        raise ValueError(f"half length must be >= 1, got {half}")
    if hi - lo < 2:
        raise ValueError(f"random-token range [{lo}, {hi}) must hold at least 2 ids")
    if distinct:
        if hi - lo < half:
            raise ValueError(f"distinct tokens need hi - lo >= half ({hi - lo} < {half})")
        first = torch.rand(batch, hi - lo, generator=gen).argsort(dim=1)[:, :half] + lo
    else:
        first = torch.randint(lo, hi, (batch, half), generator=gen)
    return torch.cat([first, first], dim=1)


def embedded_repeats(batch: int, seq_len: int, lo: int, hi: int, min_half: int,
                     gen: torch.Generator | None = None) -> torch.Tensor:
    """[batch, seq_len] random ids in [lo, hi) where a segment of random length h in [min_half, seq_len // 2]
    starting at a random position s is immediately repeated (positions s+h .. s+2h-1 copy s .. s+h-1).

    Varying h and s means the copy offset is not fixed, so a model cannot solve the task by attending to a
    fixed relative position: it has to find the earlier occurrence by content (induction).
    ``min_half == seq_len // 2`` gives the plain ``repeated_tokens`` layout.
    """
    if not 1 <= min_half <= seq_len // 2:
        raise ValueError(f"min_half must be in [1, seq_len // 2 = {seq_len // 2}], got {min_half}")
    if hi - lo < 2:
        raise ValueError(f"random-token range [{lo}, {hi}) must hold at least 2 ids")
    base = torch.randint(lo, hi, (batch, seq_len), generator=gen)
    h = torch.randint(min_half, seq_len // 2 + 1, (batch, 1), generator=gen)
    s = (torch.rand(batch, 1, generator=gen) * (seq_len - 2 * h + 1)).long()
    idx = torch.arange(seq_len)[None]
    copy = (idx >= s + h) & (idx < s + 2 * h)
    return base.gather(1, torch.where(copy, idx - h, idx).expand(batch, -1))


def mixed_batch(text_ids: torch.Tensor | None, batch: int, seq_len: int, p_repeated: float, lo: int, hi: int,
                gen: torch.Generator, min_half: int | None = None) -> torch.Tensor:
    """[batch, seq_len]: each row is a repeated random sequence with prob ``p_repeated``, else a text window.

    Repeated rows come from :func:`embedded_repeats` with segment lengths in [min_half, seq_len // 2]
    (default: ``seq_len // 2``, i.e. exactly two copies; ``seq_len`` must then be even).
    ``text_ids`` may be None only if ``p_repeated == 1``.
    """
    if not 0.0 <= p_repeated <= 1.0:
        raise ValueError(f"p_repeated must be in [0, 1], got {p_repeated}")
    if p_repeated > 0 and min_half is None and seq_len % 2:
        raise ValueError(f"seq_len must be even for repeated sequences, got {seq_len}")
    rep = torch.rand(batch, generator=gen) < p_repeated
    out = torch.empty(batch, seq_len, dtype=torch.long)
    n_rep = int(rep.sum())
    if n_rep:
        out[rep] = embedded_repeats(n_rep, seq_len, lo, hi, seq_len // 2 if min_half is None else min_half, gen)
    if n_rep < batch:
        if text_ids is None:
            raise ValueError("text_ids is None but p_repeated < 1 asks for natural-text rows")
        if len(text_ids) <= seq_len:
            raise ValueError(f"text of {len(text_ids)} tokens is too short for seq_len {seq_len}")
        starts = torch.randint(0, len(text_ids) - seq_len, (batch - n_rep,), generator=gen)
        out[~rep] = torch.stack([text_ids[s:s + seq_len] for s in starts.tolist()])
    return out
