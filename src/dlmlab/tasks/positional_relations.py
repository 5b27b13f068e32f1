"""Relation facts placed at random offsets among distractor entities: the reversal task where position matters.

Each example places one fact ``A_k -> B_k`` as a block ``[A, r .. r, B]`` (``d - 1`` relation tokens
``r``, so B sits ``d`` positions after A, ``d`` drawn from ``distances``) at a random absolute offset
``p`` of a ``seq_len``-token sequence.  ``n_distractors`` other entities (A- or B-type, never the
fact's own A or B) fill random positions outside the *margin* ``[p - d, p + 2d]``; every other
position is the pad token.  So in both query directions the answer-carrying entity is the one
nearest to the query at distance exactly ``d``, the distractors are all farther, and finding it
takes position (content alone cannot tell B from a distractor of the same type).

Token ids (``N = n_pairs``)::

    0 .. N-1     A entities          E      relation token r     (E = 2N, or 3N with other distractors)
    N .. 2N-1    B entities          E+1    pad
    2N .. 3N-1   other entities      E+2    the mask token [M] (last id)
                 (distractors="other" only)

Queries built from one :class:`Layout` (the same offsets and distractors in both directions):

* ``mdm_forward``  "[M] r.. B" -> A: mask at p, B at p+d (what the forward-only MDM trains on);
* ``mdm_reverse``  "B r.. [M]" -> A: B at p, mask at p+d (never trained);
* ``arm_forward``  "A r.." -> B, read at position p+d-1 (causal; what the ARM trains on);
* ``arm_reverse``  "B r.." -> A, read at position p+d-1.

Why it separates positional encodings: a one-layer model trained forward learns to route from the
mask to the entity ``d`` positions to its right and away from entities on its left; the reverse
query needs the mirror image.  ALiBi's bias ``-m|i - j|`` is symmetric (the mirror is free), RoPE's
``q^T R(j - i) k`` is symmetric only in part, learned absolute positions not at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from dlmlab.config import require
from dlmlab.tasks.relations import Queries


@dataclass
class PositionalTaskConfig:
    """``n_pairs`` facts in ``seq_len``-token sequences, A-B ``distances``, ``n_distractors`` other entities."""

    n_pairs: int = 64
    seq_len: int = 16
    distances: list[int] = field(default_factory=lambda: [1, 2, 3])
    n_distractors: int = 2
    # entities: distractors are other A/B entities (finding B takes position); other: a third entity set
    # that never occurs in a fact (content alone finds B)
    distractors: Literal["entities", "other"] = "entities"

    def validate(self) -> None:
        require(self.n_pairs >= 2, f"task.n_pairs must be >= 2, got {self.n_pairs}")
        require(len(self.distances) > 0 and min(self.distances) >= 1,
                f"task.distances must be non-empty and >= 1, got {self.distances}")
        require(self.n_distractors >= 0, f"task.n_distractors must be >= 0, got {self.n_distractors}")
        require(self.distractors in ("entities", "other"), f"task.distractors: entities | other, got {self.distractors!r}")
        require(self.n_distractors <= self.n_pairs, f"task.n_distractors must be <= n_pairs = {self.n_pairs}")
        if self.n_distractors:  # room for the distractors outside the fact's margin
            need, rule = 3 * max(self.distances) + 1 + self.n_distractors, "3*max(distances)+1+n_distractors"
        else:  # the fact alone; seq_len = d + 1 with one distance fixes the layout ("A r.. B" at offset 0)
            need, rule = max(self.distances) + 1, "max(distances)+1"
        require(self.seq_len >= need, f"task.seq_len must be >= {rule} = {need}, got {self.seq_len}")


@dataclass
class Layout:
    """Where each example's fact and distractors sit: fact [n], distance d [n], offset p [n] (A/first entity
    at p, B/second at p+d), distractor positions [n, K] and entity ids [n, K]."""

    fact: torch.Tensor
    d: torch.Tensor
    p: torch.Tensor
    dis_pos: torch.Tensor
    dis_ids: torch.Tensor

    def __len__(self) -> int:
        return self.fact.shape[0]


class PositionalRelations:
    """A seeded random bijection A_k -> B_k and the layouts / queries of the positional task."""

    def __init__(self, cfg: PositionalTaskConfig, seed: int = 0) -> None:
        cfg.validate()
        self.cfg = cfg
        N = cfg.n_pairs
        gen = torch.Generator().manual_seed(10_007 * seed + 17)
        self.a_ids = torch.arange(N)
        self.b_ids = N + torch.randperm(N, generator=gen)  # B of fact k is b_ids[k]
        n_ent = 2 * N if cfg.distractors == "entities" else 3 * N  # + C entities N..3N-1 for "other"
        self.rel_id, self.pad_id, self.mask_id = n_ent, n_ent + 1, n_ent + 2
        self.vocab_size = n_ent + 3
        self.seq_len = cfg.seq_len
        self.n_choices = N  # candidates of one answer type (chance accuracy = 1 / n_choices)

    # ---------------------------------------------------------------- layouts
    def layout(self, fact: torch.Tensor, gen: torch.Generator, d: torch.Tensor | None = None,
               n_distractors: int | None = None) -> Layout:
        """Random distance (unless ``d`` [n] given), offset and distractors for facts ``fact`` [n]."""
        n, L, N = fact.shape[0], self.cfg.seq_len, self.cfg.n_pairs
        K = self.cfg.n_distractors if n_distractors is None else n_distractors
        dist = torch.tensor(self.cfg.distances)
        if d is None:
            d = dist[torch.randint(0, len(dist), (n,), generator=gen)]
        p = (torch.rand(n, generator=gen) * (L - d)).long()  # p in [0, L-1-d]
        pos = torch.arange(L)
        free = (pos[None] < (p - d)[:, None]) | (pos[None] > (p + 2 * d)[:, None])  # outside the margin
        key = torch.rand(n, L, generator=gen).masked_fill(~free, 2.0)
        dis_pos = key.argsort(1)[:, :K]  # K random free positions
        # distractor entities, distinct: among the 2N - 2 entities other than the fact's A and B, or the N others
        if self.cfg.distractors == "entities":
            own = torch.stack([self.a_ids[fact], self.b_ids[fact]], 1)  # [n,2]
            ids = torch.rand(n, 2 * N, generator=gen).scatter(1, own, 2.0).argsort(1)[:, :K]
        else:
            ids = 2 * N + torch.rand(n, N, generator=gen).argsort(1)[:, :K]
        return Layout(fact, d, p, dis_pos, ids)

    def sample_layout(self, batch: int, gen: torch.Generator) -> Layout:
        """``batch`` random facts (with replacement) with random layouts."""
        return self.layout(torch.randint(0, self.cfg.n_pairs, (batch,), generator=gen), gen)

    def eval_layout(self, per_fact: int = 1, seed: int = 0) -> Layout:
        """A fixed evaluation set: every fact ``per_fact`` times, distances cycling through ``distances``."""
        gen = torch.Generator().manual_seed(1_000_003 + seed)
        fact = torch.arange(self.cfg.n_pairs).repeat(per_fact)
        dist = torch.tensor(self.cfg.distances)
        return self.layout(fact, gen, d=dist[torch.arange(fact.shape[0]) % len(dist)])

    def tokens(self, lay: Layout, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        """Sequences [n, seq_len]: ``first`` [n] at p, relation tokens, ``second`` [n] at p+d, distractors."""
        n, L = len(lay), self.cfg.seq_len
        pos = torch.arange(L)[None]
        x = torch.full((n, L), self.pad_id, dtype=torch.long)
        x[(pos > lay.p[:, None]) & (pos < (lay.p + lay.d)[:, None])] = self.rel_id
        x.scatter_(1, lay.dis_pos, lay.dis_ids)
        rows = torch.arange(n)
        x[rows, lay.p] = first
        x[rows, lay.p + lay.d] = second
        return x

    def documents(self, lay: Layout) -> torch.Tensor:
        """Forward documents "A r.. B" among distractors [n, seq_len]."""
        return self.tokens(lay, self.a_ids[lay.fact], self.b_ids[lay.fact])

    # ---------------------------------------------------------------- queries
    def mdm_forward(self, lay: Layout) -> Queries:
        """"[M] r.. B" -> A at p (evidence B at p+d)."""
        x = self.tokens(lay, torch.full_like(lay.fact, self.mask_id), self.b_ids[lay.fact])
        return Queries(x, lay.p.clone(), self.a_ids[lay.fact], lay.p + lay.d)

    def mdm_reverse(self, lay: Layout) -> Queries:
        """"B r.. [M]" -> A at p+d (evidence B at p)."""
        x = self.tokens(lay, self.b_ids[lay.fact], torch.full_like(lay.fact, self.mask_id))
        return Queries(x, lay.p + lay.d, self.a_ids[lay.fact], lay.p.clone())

    def arm_forward(self, lay: Layout) -> Queries:
        """"A r.." -> B, predicted at p+d-1 (the answer position itself holds pad)."""
        x = self.tokens(lay, self.a_ids[lay.fact], torch.full_like(lay.fact, self.pad_id))
        return Queries(x, lay.p + lay.d - 1, self.b_ids[lay.fact], lay.p.clone())

    def arm_reverse(self, lay: Layout) -> Queries:
        """"B r.." -> A, predicted at p+d-1."""
        x = self.tokens(lay, self.b_ids[lay.fact], torch.full_like(lay.fact, self.pad_id))
        return Queries(x, lay.p + lay.d - 1, self.a_ids[lay.fact], lay.p.clone())

    def probes(self, distance: int, reverse: bool, per_fact: int = 1, seed: int = 0) -> Queries:
        """MDM queries at one ``distance`` in [1, seq_len - 1], no distractors (a one-layer pre-softmax score
        depends only on the two tokens and their positions), at random offsets; the forward and the reverse
        probes of one ``seed`` share offsets and facts."""
        require(1 <= distance < self.cfg.seq_len, f"distance must be in [1, {self.cfg.seq_len - 1}], got {distance}")
        gen = torch.Generator().manual_seed(2_000_003 + 7919 * distance + seed)
        fact = torch.arange(self.cfg.n_pairs).repeat(per_fact)
        lay = self.layout(fact, gen, d=torch.full_like(fact, distance), n_distractors=0)
        return self.mdm_reverse(lay) if reverse else self.mdm_forward(lay)
