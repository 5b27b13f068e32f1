"""Relation facts "A is B" for reversal-curse experiments: synthetic entity pairs and real data.

Synthetic task (:class:`SyntheticRelations`)
    ``n_pairs`` facts ``A_k -> B_k`` over two disjoint entity sets (a random bijection).
    A fact is the sequence ``[A, f_1 .. f_gap, B]`` (``gap`` relation/filler tokens,
    gap=1 is "A is B").  Token ids::

        0 .. N-1            A entities
        N .. 2N-1           B entities
        2N .. 2N+gap-1      filler tokens ("is", ...)
        2N+gap              the mask token [M] (last id, the toolkit convention)

    Queries, all asking for one token at one position (``Queries``):

    * ``mdm_forward``  "[M] is B" -> A at position 0 (what the forward-only MDM trains on);
    * ``mdm_reverse``  "B is [M]" -> A at the last position (evaluated only);
    * ``arm_forward``  "A is" -> B at the last input position (what the ARM trains on);
    * ``arm_reverse``  "B is" -> A at the last input position (evaluated only).

Real data (:func:`load_person_description`, :func:`load_celebrity_pairs`)
    The reversal-curse files under ``data_root()/reversal_curse``: JSONL prompt/completion
    facts and celebrity child/parent pairs, with a byte-level BPE tokenizer trained locally
    (:func:`train_relation_tokenizer`) and :func:`encode_candidates` to score completions.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from dlmlab.config import require
from dlmlab.data.paths import DataNotFound, data_root


@dataclass
class RelationTaskConfig:
    """Synthetic relation task: ``n_pairs`` facts, ``gap`` filler tokens between A and B."""

    n_pairs: int = 64
    gap: int = 1

    def validate(self) -> None:
        require(self.n_pairs >= 2, f"task.n_pairs must be >= 2, got {self.n_pairs}")
        require(self.gap >= 0, f"task.gap must be >= 0, got {self.gap}")


@dataclass
class Queries:
    """One-token queries: ``tokens`` [N,T] (mask already placed), predict ``target`` [N] at ``query_pos`` [N].

    ``evidence_pos`` [N] is the position of the token that carries the answer (B for every
    query above; A for ``arm_forward``); ``source`` [N] is the token id there.
    """

    tokens: torch.Tensor
    query_pos: torch.Tensor
    target: torch.Tensor
    evidence_pos: torch.Tensor

    @property
    def source(self) -> torch.Tensor:
        return self.tokens.gather(1, self.evidence_pos[:, None]).squeeze(1)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def subset(self, idx: torch.Tensor) -> "Queries":
        return Queries(self.tokens[idx], self.query_pos[idx], self.target[idx], self.evidence_pos[idx])

    def to(self, device) -> "Queries":
        return Queries(self.tokens.to(device), self.query_pos.to(device), self.target.to(device),
                       self.evidence_pos.to(device))


class SyntheticRelations:
    """A fixed random bijection A_k -> B_k (seeded) and the sequences / queries built from it."""

    def __init__(self, cfg: RelationTaskConfig, seed: int = 0) -> None:
        cfg.validate()
        self.cfg = cfg
        N, g = cfg.n_pairs, cfg.gap
        gen = torch.Generator().manual_seed(10_007 * seed + 17)
        self.a_ids = torch.arange(N)
        self.b_ids = N + torch.randperm(N, generator=gen)  # B of fact k is b_ids[k]
        self.filler = torch.arange(2 * N, 2 * N + g)
        self.mask_id = 2 * N + g
        self.vocab_size = 2 * N + g + 1
        self.seq_len = g + 2

    # ---------------------------------------------------------------- sequences
    def facts(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Forward documents [n, gap+2] = [A, fillers, B] for facts ``idx`` (all when None)."""
        idx = torch.arange(self.cfg.n_pairs) if idx is None else idx
        n = idx.shape[0]
        return torch.cat([self.a_ids[idx, None], self.filler[None].expand(n, -1), self.b_ids[idx, None]], dim=1)

    def sample(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        """Fact indices [batch] drawn uniformly with replacement."""
        return torch.randint(0, self.cfg.n_pairs, (batch,), generator=gen)

    # ---------------------------------------------------------------- queries
    def _q(self, tokens: torch.Tensor, qpos: int, target: torch.Tensor, epos: int) -> Queries:
        n = tokens.shape[0]
        return Queries(tokens, torch.full((n,), qpos), target.clone(), torch.full((n,), epos))

    def mdm_forward(self, idx: torch.Tensor | None = None, distance: int | None = None) -> Queries:
        """"[M] f.. B" -> A at position 0; ``distance`` (default gap+1) sets how far B is from [M]."""
        idx, toks = self._fill(idx, distance)
        toks[:, 0], toks[:, -1] = self.mask_id, self.b_ids[idx]
        return self._q(toks, 0, self.a_ids[idx], toks.shape[1] - 1)

    def mdm_reverse(self, idx: torch.Tensor | None = None, distance: int | None = None) -> Queries:
        """"B f.. [M]" -> A at the last position (the reverse query)."""
        idx, toks = self._fill(idx, distance)
        toks[:, 0], toks[:, -1] = self.b_ids[idx], self.mask_id
        return self._q(toks, toks.shape[1] - 1, self.a_ids[idx], 0)

    def arm_forward(self, idx: torch.Tensor | None = None) -> Queries:
        """"A f.." -> B, predicted at the last input position (next-token)."""
        idx, toks = self._fill(idx, None)
        toks = toks[:, :-1].clone()
        toks[:, 0] = self.a_ids[idx]
        return self._q(toks, toks.shape[1] - 1, self.b_ids[idx], 0)

    def arm_reverse(self, idx: torch.Tensor | None = None) -> Queries:
        """"B f.." -> A, predicted at the last input position (next-token)."""
        idx, toks = self._fill(idx, None)
        toks = toks[:, :-1].clone()
        toks[:, 0] = self.b_ids[idx]
        return self._q(toks, toks.shape[1] - 1, self.a_ids[idx], 0)

    def _fill(self, idx, distance):
        idx = torch.arange(self.cfg.n_pairs) if idx is None else idx
        d = self.cfg.gap + 1 if distance is None else distance
        require(d >= 1, f"distance must be >= 1, got {d}")
        filler = self.filler[0] if self.cfg.gap else self.mask_id
        toks = torch.full((idx.shape[0], d + 1), int(filler), dtype=torch.long)
        if d - 1 == self.cfg.gap:
            toks[:, 1:-1] = self.filler
        return idx, toks


# ====================================================================== real data
@dataclass
class TextFacts:
    """Prompt/completion facts: ``prompts``/``completions`` lists and the entity id of each (for grouping)."""

    prompts: list[str]
    completions: list[str]

    def texts(self) -> list[str]:
        return [p + c for p, c in zip(self.prompts, self.completions)]

    def __len__(self) -> int:
        return len(self.prompts)


def _reversal_dir(root: Path | None) -> Path:
    base = (root or data_root()) / "reversal_curse"
    if not base.exists():
        raise DataNotFound(f"reversal-curse data not found at {base}")
    return base


def _read_jsonl(path: Path) -> TextFacts:
    if not path.exists():
        raise DataNotFound(f"missing reversal-curse file {path}")
    prompts, comps = [], []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompts.append(row["prompt"])
            comps.append(row["completion"])
        except (json.JSONDecodeError, KeyError) as e:
            raise ValueError(f"{path}:{i + 1}: expected a JSON object with prompt/completion ({e})") from None
    return TextFacts(prompts, comps)


PERSON_SPLITS = ("p2d_prompts_train", "p2d_prompts_test", "p2d_reverse_prompts_test",
                 "d2p_prompts_train", "d2p_prompts_test", "d2p_reverse_prompts_test",
                 "both_prompts_train", "both_prompts_test", "validation_prompts")


def load_person_description(split: str, root: Path | None = None) -> TextFacts:
    """One JSONL split of the fictitious person <-> description facts (see ``PERSON_SPLITS``).

    ``p2d_*``: name first (train) / same order (test); ``p2d_reverse_prompts_test``: the same facts
    asked description-first, completion = the name.
    """
    if split not in PERSON_SPLITS:
        raise ValueError(f"unknown person-description split {split!r}; choose from {list(PERSON_SPLITS)}")
    return _read_jsonl(_reversal_dir(root) / "person_description" / f"{split}.jsonl")


@dataclass
class ParentChild:
    child: str
    parent: str
    parent_type: str  # "mother" | "father"


def load_celebrity_pairs(root: Path | None = None) -> list[ParentChild]:
    """Celebrity child/parent pairs (``celebrity_relations/parent_child_pairs.csv``)."""
    path = _reversal_dir(root) / "celebrity_relations" / "parent_child_pairs.csv"
    if not path.exists():
        raise DataNotFound(f"missing reversal-curse file {path}")
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for i, row in enumerate(csv.DictReader(f)):
            try:
                out.append(ParentChild(row["child"].strip(), row["parent"].strip(), row["parent_type"].strip()))
            except KeyError as e:
                raise ValueError(f"{path}: row {i + 2} lacks column {e}") from None
    return out


def celebrity_facts(pairs: list[ParentChild]) -> tuple[TextFacts, TextFacts]:
    """(forward, reverse) facts: "C's mother is" -> " P" and "P's child is" -> " C"."""
    fwd = TextFacts([f"{p.child}'s {p.parent_type} is" for p in pairs], [f" {p.parent}" for p in pairs])
    rev = TextFacts([f"{p.parent}'s child is" for p in pairs], [f" {p.child}" for p in pairs])
    return fwd, rev


def train_relation_tokenizer(texts: list[str], vocab_size: int = 1024):
    """Byte-level BPE trained locally on ``texts`` (toolkit :class:`~dlmlab.data.BPETokenizer`)."""
    from dlmlab.data import BPETokenizer

    return BPETokenizer.train(texts, vocab_size)


def encode_facts(tok, facts: TextFacts, seq_len: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode prompt+completion into ``tokens`` [N, seq_len] (right-padded with ``pad_id``) and
    ``is_completion`` [N, seq_len] bool.  Raises ValueError when a fact does not fit."""
    rows, comp = [], []
    for p, c in zip(facts.prompts, facts.completions):
        pi, ci = tok.encode(p), tok.encode(c)
        if len(pi) + len(ci) > seq_len:
            raise ValueError(f"fact of {len(pi) + len(ci)} tokens exceeds seq_len {seq_len}: {p + c!r}")
        pad = seq_len - len(pi) - len(ci)
        rows.append(pi + ci + [pad_id] * pad)
        comp.append([False] * len(pi) + [True] * len(ci) + [False] * pad)
    return torch.tensor(rows, dtype=torch.long), torch.tensor(comp)
