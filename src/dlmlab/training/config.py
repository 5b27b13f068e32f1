"""Optimisation / training-loop configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dlmlab.config import Config, require


@dataclass
class TrainConfig(Config):
    """AdamW + warmup/decay schedule, logging and checkpoint cadence.

    ``batch_size`` is the global batch: with N processes each takes batch_size / N rows.
    ``ckpt_every = 0`` writes a checkpoint only at the end; ``keep_checkpoints = 0`` keeps all.
    Checked when built: a ``schedule`` outside its options or a NaN / infinite number is refused.
    After changing a field in place, call ``check()``.
    """

    steps: int = 1000
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.95
    warmup_steps: int = 0
    schedule: Literal["constant", "cosine", "linear"] = "cosine"
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 10
    eval_every: int = 0
    ckpt_every: int = 0
    keep_checkpoints: int = 2
    progress: bool = True

    def validate(self) -> None:
        require(self.steps > 0, f"train.steps must be > 0, got {self.steps}")
        require(self.batch_size > 0, f"train.batch_size must be > 0, got {self.batch_size}")
        require(self.lr > 0, f"train.lr must be > 0, got {self.lr}")
        require(self.weight_decay >= 0, f"train.weight_decay must be >= 0, got {self.weight_decay}")
        require(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "train.beta1/beta2 must be in [0, 1)")
        require(0 <= self.warmup_steps <= self.steps, f"train.warmup_steps must be in [0, steps], got {self.warmup_steps}")
        require(0 <= self.min_lr_ratio <= 1, f"train.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        require(self.grad_clip >= 0, f"train.grad_clip must be >= 0, got {self.grad_clip}")
        require(self.log_every > 0, f"train.log_every must be > 0, got {self.log_every}")
        require(self.eval_every >= 0 and self.ckpt_every >= 0, "train.eval_every / ckpt_every must be >= 0")
        require(self.keep_checkpoints >= 0, "train.keep_checkpoints must be >= 0")


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate for 1-based ``step``: linear warmup then constant / cosine / linear decay."""
    if cfg.warmup_steps and step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, cfg.steps - cfg.warmup_steps)
    frac = min(1.0, (step - cfg.warmup_steps) / span)
    import math

    decay = 0.5 * (1 + math.cos(math.pi * frac)) if cfg.schedule == "cosine" else 1 - frac
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * decay)
