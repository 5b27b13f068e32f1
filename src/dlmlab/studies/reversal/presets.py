"""Typed presets of the reversal study (smoke: CI seconds; cpu: minutes on 2 cores; paper: GPU scale, one-layer
controlled experiments plus a separate multi-layer part; ladder: the cpu recipe at several widths)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from dlmlab.config import Config, require
from dlmlab.models import TransformerConfig
from dlmlab.tasks.positional_relations import PositionalTaskConfig
from dlmlab.training import TrainConfig

PE = Literal["learned", "rope", "alibi"]
Kind = Literal["mdm", "mdm_mdlm", "arm"]


@dataclass
class RealDataPreset(Config):  # checked when built: options, finite numbers, validate()
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
    rank_items: int = 0  # ranking items per set, evenly spaced over it (0: every item; first-steps runs only)

    def validate(self) -> None:
        top = 30 if self.dataset == "person_description" else 1000
        require(1 < self.n_facts <= top, f"real.n_facts must be in [2, {top}] for {self.dataset}, got {self.n_facts}")
        require(self.seq_len >= 8, f"real.seq_len must be >= 8, got {self.seq_len}")
        require(self.rank_items >= 0, f"real.rank_items must be >= 0, got {self.rank_items}")


@dataclass
class ReversalPreset(Config):  # checked when built: options, finite numbers, validate()
    """One run of the study: every (model kind x positional encoding x seed) is trained forward-only on the
    positional relation task; ``multilayer`` (optional) repeats the grid with a deeper model as a separate part."""

    task: PositionalTaskConfig = field(default_factory=PositionalTaskConfig)
    model: TransformerConfig = field(default_factory=lambda: TransformerConfig(d_model=64, n_layers=1, n_heads=4))
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=400, batch_size=64, lr=1e-3, log_every=25,
                                                                   weight_decay=0.0, schedule="constant"))
    # mdm: MDM trained on "[M] r.. B" -> A only (given mask); mdm_mdlm: MDM trained with random MDLM masks of the
    # documents (any-order objective); arm: next-token prediction of B after "A r..".
    kinds: list[Kind] = field(default_factory=lambda: ["mdm", "arm"])
    positions: list[PE] = field(default_factory=lambda: ["learned", "rope", "alibi"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    eval_per_fact: int = 1  # evaluation layouts per fact (distances cycle through task.distances)
    max_distance: int = 8  # attention signatures at distances 1..max_distance (< task.seq_len)
    multilayer: TransformerConfig | None = None  # the separate multi-layer part (None: not run)
    # the study's own fixed-layout pair task "A r B" (one layout, no distractors; see fixed_pair_task): the MDM
    # kinds are trained on it too, for the PE ordering as the study measures it (None: not run)
    pair_task: PositionalTaskConfig | None = None
    # the pair task's one-layer model (None: ``model``); the cpu preset trains it wider, where the ladder shows
    # learned positions failing, so that the ordering has room (issue 34)
    pair_model: TransformerConfig | None = None
    eval_facts: int = 0  # evaluate on the first k facts only (0: every fact; first-steps runs only)
    part: Literal["controlled", "multilayer", "pair"] = "controlled"  # which part this preset's grid runs
    device: str = "auto"  # auto (cuda when available) | cpu | cuda | cuda:N
    real: RealDataPreset = field(default_factory=RealDataPreset)

    def validate(self) -> None:
        self.task.validate()
        require(len(self.seeds) > 0, "seeds must not be empty")
        require(len(set(self.positions)) == len(self.positions) > 0, "positions must be non-empty and distinct")
        require(len(set(self.kinds)) == len(self.kinds) > 0, "kinds must be non-empty and distinct")
        if self.part != "pair":  # the pair task is too short for attention probes at several distances
            require(3 <= self.max_distance < self.task.seq_len,
                    f"max_distance must be in [3, task.seq_len - 1 = {self.task.seq_len - 1}], got {self.max_distance}")
        require(self.eval_per_fact >= 1, f"eval_per_fact must be >= 1, got {self.eval_per_fact}")
        require(self.eval_facts >= 0, f"eval_facts must be >= 0, got {self.eval_facts}")
        require(self.pair_model is None or self.pair_model.n_layers == 1, "pair_model must be one-layer")
        if self.part == "multilayer":
            require(self.model.n_layers > 1 and self.multilayer is None, "the multi-layer part runs one deeper model")
        else:
            require(self.model.n_layers == 1, "the controlled experiments are one-layer (use multilayer for deeper models)")
        require(self.multilayer is None or self.multilayer.n_layers > 1, "multilayer must have more than one layer")
        if self.pair_task is not None:
            self.pair_task.validate()
            require(self.pair_task.n_distractors == 0 and len(self.pair_task.distances) == 1
                    and self.pair_task.seq_len == self.pair_task.distances[0] + 1,
                    "pair_task must be a fixed layout: one distance d, no distractors, seq_len = d + 1 "
                    "(use fixed_pair_task)")
            require(any(k.startswith("mdm") for k in self.kinds), "pair_task needs an MDM kind")


def fixed_pair_task(n_pairs: int, gap: int = 1) -> PositionalTaskConfig:
    """The study's fixed-layout pair task: every fact is the sequence "A r.. B" (``gap`` relation tokens) at the
    same positions, no distractors, so the forward query is "[M] r.. B" at position 0 and the reverse query
    "B r.. [M]" at position ``gap + 1``, as in the study's one-layer experiments."""
    return PositionalTaskConfig(n_pairs=n_pairs, seq_len=gap + 2, distances=[gap + 1], n_distractors=0)


@dataclass
class ReversalLadder(Config):  # checked when built: options, finite numbers, validate()
    """The scale ladder: the ``base`` recipe (task, steps, seeds, kinds, positions; no real-data part) trained
    at every model width in ``widths`` (one layer, ``base.model.n_heads`` heads), for the statistics that only
    scale can settle (:mod:`dlmlab.studies.reversal.ladder`)."""

    base: ReversalPreset = field(default_factory=ReversalPreset)
    widths: list[int] = field(default_factory=lambda: [32, 64, 128, 256])

    def validate(self) -> None:
        self.base.validate()
        require(not self.base.real.enabled and self.base.multilayer is None and self.base.part == "controlled",
                "the ladder trains the one-layer controlled grid only (no real-data or multi-layer part)")
        require(len(self.widths) >= 2 and list(self.widths) == sorted(set(self.widths)),
                f"ladder widths must be >= 2 distinct increasing values, got {self.widths}")
        h = self.base.model.n_heads
        require(all(w >= h and w % h == 0 for w in self.widths),
                f"every ladder width must be a multiple of n_heads = {h}, got {self.widths}")
        require(len(self.base.seeds) >= 2, "the ladder needs >= 2 seeds per width for an interval")


# Training steps, sized from measured single-thread CPU time per step / evaluation (docs/reversal.md, "Sizing").
SMOKE_STEPS, CPU_STEPS = 200, 800


def _constant(steps: int, batch: int, log_every: int, lr: float = 1e-3) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=batch, lr=lr, log_every=log_every, weight_decay=0.0, schedule="constant")


def _smoke() -> ReversalPreset:
    return ReversalPreset(
        task=PositionalTaskConfig(n_pairs=32, seq_len=16, distances=[1, 2, 3], n_distractors=3),
        model=TransformerConfig(d_model=32, n_layers=1, n_heads=4),
        train=_constant(SMOKE_STEPS, 64, 25), seeds=[0, 1, 2], max_distance=6, pair_task=fixed_pair_task(32),
    )


def _cpu_synthetic() -> ReversalPreset:
    """The cpu preset's one-layer grid (offset task and fixed-layout pair task), without the real-data part."""
    return ReversalPreset(
        task=PositionalTaskConfig(n_pairs=64, seq_len=24, distances=[1, 2, 3, 4, 5], n_distractors=6),
        model=TransformerConfig(d_model=64, n_layers=1, n_heads=4),
        train=_constant(CPU_STEPS, 64, 50), seeds=[0, 1, 2], max_distance=12, pair_task=fixed_pair_task(64),
    )


# The pair task's width in the cpu preset: the ladder's widest, where learned positions fail on it (issue 34).
CPU_PAIR_WIDTH = 256


def _cpu() -> ReversalPreset:
    return dataclasses.replace(
        _cpu_synthetic(), pair_model=TransformerConfig(d_model=CPU_PAIR_WIDTH, n_layers=1, n_heads=4),
        real=RealDataPreset(enabled=True, n_facts=10,
                            model=TransformerConfig(d_model=64, n_layers=2, n_heads=4, d_mlp=256),
                            train=TrainConfig(steps=2000, batch_size=32, lr=3e-3, warmup_steps=50, log_every=50)),
    )


def _paper() -> ReversalPreset:
    """One-layer controlled experiments at GPU scale; the multi-layer part (4 layers with MLPs) beside them."""
    return ReversalPreset(
        task=PositionalTaskConfig(n_pairs=500, seq_len=32, distances=[1, 2, 3, 4, 5, 6, 7], n_distractors=8),
        model=TransformerConfig(d_model=256, n_layers=1, n_heads=8),
        train=_constant(20000, 256, 250), kinds=["mdm", "mdm_mdlm", "arm"], seeds=[0, 1, 2, 3, 4],
        eval_per_fact=2, max_distance=16, pair_task=fixed_pair_task(500),
        multilayer=TransformerConfig(d_model=256, n_layers=4, n_heads=8, d_mlp=1024),
        real=RealDataPreset(enabled=True, model=TransformerConfig(d_model=384, n_layers=6, n_heads=6, d_mlp=1536),
                            train=TrainConfig(steps=20000, batch_size=128, lr=5e-4, warmup_steps=500),
                            positions=["learned", "rope", "alibi"]),
    )


# The ladder's widths (one layer, 4 heads) and budget: 15 minutes on 2 idle cores (docs/reversal.md, "Scale ladder").
LADDER_WIDTHS = [32, 64, 128, 256]


def _ladder() -> ReversalLadder:
    return ReversalLadder(base=_cpu_synthetic(), widths=list(LADDER_WIDTHS))


def first_steps(preset: ReversalPreset, steps: int) -> ReversalPreset:
    """``preset`` (the paper preset) for a first-steps check on any machine (``scripts/paper_first_steps.py``): the
    same model shapes, tasks and grid (kinds, positions, multi-layer and real-data parts, 3 seeds: the real-data
    claim's minimum) but at most ``steps`` optimizer steps per model, batch 8, evaluation on the first 8 facts
    (the tracked metrics take one gradient per fact at every log), attention signatures at distances 1-4, 4
    real-data ranking items per set and a log at step 0 and after the last step, so every analysis and claim
    runs in a few CPU minutes.  Its claims say nothing about the study."""
    steps = max(1, int(steps))

    def short(t: TrainConfig) -> TrainConfig:
        return dataclasses.replace(t, steps=min(t.steps, steps), batch_size=min(t.batch_size, 8), log_every=steps,
                                   warmup_steps=min(t.warmup_steps, max(steps - 1, 0)))

    return dataclasses.replace(preset, train=short(preset.train), seeds=list(preset.seeds)[:3], eval_per_fact=1,
                               eval_facts=8, max_distance=4, device="auto",
                               real=dataclasses.replace(preset.real, train=short(preset.real.train), rank_items=4))


PRESETS: dict[str, ReversalPreset | ReversalLadder] = {"smoke": _smoke(), "cpu": _cpu(), "paper": _paper(),
                                                       "ladder": _ladder()}
