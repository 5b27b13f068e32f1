"""Typed presets of the reversal study (smoke: CI seconds; cpu: minutes on 2 cores; paper: GPU scale)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dlmlab.config import require
from dlmlab.models import TransformerConfig
from dlmlab.tasks.relations import RelationTaskConfig
from dlmlab.training import TrainConfig

PE = Literal["learned", "rope", "alibi"]
Kind = Literal["mdm", "arm"]


@dataclass
class RealDataPreset:
    """Second task: the person/description facts (train p2d, test the reverse prompts) with a local BPE.

    ``n_facts`` of the 30 fictitious people are used; reverse accuracy = the true name has the highest
    likelihood among the names of all ``n_facts`` people.
    """

    enabled: bool = False
    n_facts: int = 30
    bpe_vocab: int = 2048  # BPE saturates near 1.5k tokens on these texts
    seq_len: int = 64
    model: TransformerConfig = field(default_factory=lambda: TransformerConfig(d_model=128, n_layers=2, n_heads=4, d_mlp=512))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=1500, batch_size=64, lr=3e-3, warmup_steps=50))
    positions: list[PE] = field(default_factory=lambda: ["rope"])

    def validate(self) -> None:
        require(1 < self.n_facts <= 30, f"real.n_facts must be in [2, 30], got {self.n_facts}")
        require(self.seq_len >= 8, f"real.seq_len must be >= 8, got {self.seq_len}")


@dataclass
class ReversalPreset:
    """One run of the study: every (model kind x positional encoding x seed) is trained forward-only."""

    task: RelationTaskConfig = field(default_factory=RelationTaskConfig)
    model: TransformerConfig = field(default_factory=lambda: TransformerConfig(d_model=64, n_layers=1, n_heads=2))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=400, batch_size=64, lr=1e-3, log_every=25,
                                                                   weight_decay=0.0, schedule="constant"))
    kinds: list[Kind] = field(default_factory=lambda: ["mdm", "arm"])
    positions: list[PE] = field(default_factory=lambda: ["learned", "rope", "alibi"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    mdm_objective: Literal["given_mask", "mdlm"] = "given_mask"
    max_distance: int = 8  # attention correlation measured for distances 1..max_distance
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
        train=TrainConfig(steps=1200, batch_size=128, lr=1e-3, log_every=50, weight_decay=0.0, schedule="constant"),
        seeds=[0, 1, 2], max_distance=8,
        real=RealDataPreset(enabled=True),
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
