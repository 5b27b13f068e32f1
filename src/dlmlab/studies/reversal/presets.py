"""Typed presets of the reversal study (smoke: CI seconds; cpu: minutes on 2 cores; paper: GPU scale)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dlmlab.config import require
from dlmlab.models import TransformerConfig
from dlmlab.tasks.relations import RelationTaskConfig
from dlmlab.training import TrainConfig

PE = Literal["learned", "rope", "alibi"]
Kind = Literal["mdm", "mdm_mdlm", "arm"]


@dataclass
class RealDataPreset:
    """Second task: real facts with a local BPE: person/description (train p2d, test the reverse prompts) or
    celebrity child -> parent pairs (train forward, test "P's child is" -> C).

    ``n_facts`` people (pairs) are used; accuracy = the true completion has the highest likelihood among the
    completions of all ``n_facts`` people (pairs).
    """

    enabled: bool = False
    dataset: Literal["person_description", "celebrity"] = "person_description"
    n_facts: int = 30  # people (person_description: at most 30) or celebrity pairs
    bpe_vocab: int = 2048  # BPE saturates near 1.5k tokens on these texts
    seq_len: int = 64
    model: TransformerConfig = field(default_factory=lambda: TransformerConfig(d_model=128, n_layers=2, n_heads=4, d_mlp=512))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=1500, batch_size=64, lr=3e-3, warmup_steps=50))
    positions: list[PE] = field(default_factory=lambda: ["rope"])

    def validate(self) -> None:
        top = 30 if self.dataset == "person_description" else 1000
        require(1 < self.n_facts <= top, f"real.n_facts must be in [2, {top}] for {self.dataset}, got {self.n_facts}")
        require(self.seq_len >= 8, f"real.seq_len must be >= 8, got {self.seq_len}")


@dataclass
class ReversalPreset:
    """One run of the study: every (model kind x positional encoding x seed) is trained forward-only."""

    task: RelationTaskConfig = field(default_factory=RelationTaskConfig)
    model: TransformerConfig = field(default_factory=lambda: TransformerConfig(d_model=64, n_layers=1, n_heads=2))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=400, batch_size=64, lr=1e-3, log_every=25,
                                                                   weight_decay=0.0, schedule="constant"))
    # mdm: MDM trained on "[M] is B" -> A only (given mask); mdm_mdlm: MDM trained with random MDLM masks of
    # "A is B" (any-order objective, also trains "A is [M]" -> B); arm: next-token on "A is B".
    kinds: list[Kind] = field(default_factory=lambda: ["mdm", "mdm_mdlm", "arm"])
    positions: list[PE] = field(default_factory=lambda: ["learned", "rope", "alibi"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    max_distance: int = 8  # attention correlation measured for distances 1..max_distance
    device: str = "auto"  # auto (cuda when available) | cpu | cuda | cuda:N
    real: RealDataPreset = field(default_factory=RealDataPreset)

    def validate(self) -> None:
        require(len(self.seeds) > 0, "seeds must not be empty")
        require(len(set(self.positions)) == len(self.positions) > 0, "positions must be non-empty and distinct")
        require(len(set(self.kinds)) == len(self.kinds) > 0, "kinds must be non-empty and distinct")
        require(self.max_distance >= 1, f"max_distance must be >= 1, got {self.max_distance}")
        require(self.model.n_layers >= 1, "the reversal study needs at least one layer")


def _smoke() -> ReversalPreset:
    return ReversalPreset(
        task=RelationTaskConfig(n_pairs=64, gap=1),
        train=TrainConfig(steps=400, batch_size=64, lr=1e-3, log_every=25, weight_decay=0.0, schedule="constant"),
        seeds=[0, 1], max_distance=6,
    )


def _cpu() -> ReversalPreset:
    return ReversalPreset(
        task=RelationTaskConfig(n_pairs=128, gap=1),
        model=TransformerConfig(d_model=128, n_layers=1, n_heads=4),
        train=TrainConfig(steps=600, batch_size=128, lr=1e-3, log_every=25, weight_decay=0.0, schedule="constant"),
        seeds=[0, 1, 2], max_distance=8,
        real=RealDataPreset(enabled=True, n_facts=10,
                            model=TransformerConfig(d_model=64, n_layers=2, n_heads=4, d_mlp=256),
                            train=TrainConfig(steps=2000, batch_size=32, lr=3e-3, warmup_steps=50, log_every=50)),
    )


def _paper() -> ReversalPreset:
    return ReversalPreset(
        task=RelationTaskConfig(n_pairs=200, gap=1),
        model=TransformerConfig(d_model=256, n_layers=4, n_heads=8, d_mlp=1024),
        train=TrainConfig(steps=20000, batch_size=200, lr=1e-3, warmup_steps=500, log_every=200, weight_decay=0.01),
        seeds=[0, 1, 2, 3, 4], max_distance=16,
        real=RealDataPreset(enabled=True, model=TransformerConfig(d_model=384, n_layers=6, n_heads=6, d_mlp=1536),
                            train=TrainConfig(steps=20000, batch_size=128, lr=5e-4, warmup_steps=500),
                            positions=["learned", "rope", "alibi"]),
    )


PRESETS: dict[str, ReversalPreset] = {"smoke": _smoke(), "cpu": _cpu(), "paper": _paper()}
