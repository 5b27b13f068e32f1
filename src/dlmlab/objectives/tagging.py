"""Per-position classification: :class:`TaggingObjective` (the state study's tasks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from dlmlab.config import require
from dlmlab.objectives.objective import Batch, CardObjective, model_device


@dataclass(eq=False)
class TaggingObjective(CardObjective):
    """Per-position labels: ``batch["labels"]`` [B, T] read off ``model(batch["tokens"])`` [B, T, C]; float32
    cross-entropy over every position, with the accuracy as a metric.  Card: ``{"objective": "tagging"}``."""

    name: ClassVar[str] = "tagging"

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None = None, step: int = 0,
                   **extra: torch.Tensor) -> Batch:
        require("labels" in extra, "a tagging batch needs labels")
        return {"tokens": tokens, **extra}

    def loss(self, model, batch: Batch) -> tuple[torch.Tensor, dict]:
        dev = model_device(model)
        labels = batch["labels"].to(dev)
        logits = model(batch["tokens"].to(dev))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        acc = (logits.argmax(-1) == labels).float().mean()
        return loss, {"loss": loss.detach(), "acc": acc}

    def to_card(self) -> dict:
        return {"objective": self.name}

    @classmethod
    def from_card(cls, card: dict, where: str = "model.json") -> "TaggingObjective":
        return cls()
