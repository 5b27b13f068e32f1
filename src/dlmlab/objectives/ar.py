"""Autoregressive next-token objective: :class:`ARObjective` and its function form :func:`ar_loss`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from dlmlab.objectives.objective import Batch, CardObjective, card_error, model_device, token_nll


@dataclass(eq=False)
class ARObjective(CardObjective):
    """Next-token prediction on ``batch["tokens"]`` [B, T+1]: the model reads ``tokens[:, :-1]`` and predicts
    ``tokens[:, 1:]``.

    ``pad_id``: targets equal to it are ignored.  ``per_row``: the mean over each row's (non-pad) targets,
    then over rows (every row weighs the same, so a batch split over ranks averages to the whole batch's
    loss); otherwise the mean over all (non-pad) targets of the batch.  ``float32``: score float32 logits
    (``.float()`` of the model's).  Card: ``{"objective": "ar", "pad_id", "per_row", "float32"}``.
    """

    pad_id: int | None = None
    per_row: bool = False
    float32: bool = False

    name: ClassVar[str] = "ar"
    shift_logits: ClassVar[bool] = True
    next_token: ClassVar[bool] = True

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None = None, step: int = 0,
                   **extra: torch.Tensor) -> Batch:
        """``tokens`` [B, T+1] (nothing is drawn)."""
        return {"tokens": tokens, **extra}

    def loss(self, model, batch: Batch, **forward_kwargs) -> tuple[torch.Tensor, dict]:
        x = batch["tokens"].to(model_device(model))
        logits = model(x[:, :-1], **forward_kwargs)
        if self.float32:
            logits = logits.float()
        tgt = x[:, 1:]
        if self.per_row:
            keep = (tgt != self.pad_id).float() if self.pad_id is not None else torch.ones_like(tgt, dtype=torch.float)
            nll = token_nll(logits, tgt) * keep
            loss = (nll.sum(1) / keep.sum(1).clamp(min=1)).mean()
        elif self.pad_id is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=self.pad_id)
        else:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
        value = loss.detach()
        return loss, {"loss": value, "ppl": torch.exp(value)}

    def to_card(self) -> dict:
        return {"objective": self.name, "pad_id": self.pad_id, "per_row": self.per_row, "float32": self.float32}

    @classmethod
    def from_card(cls, card: dict, where: str = "model.json") -> "ARObjective":
        pad_id = card.get("pad_id")
        if pad_id is not None and (not isinstance(pad_id, int) or isinstance(pad_id, bool)):
            raise card_error(where, f"pad_id must be a token id or null, got {pad_id!r}")
        flags = {k: card.get(k, False) for k in ("per_row", "float32")}
        for k, v in flags.items():
            if not isinstance(v, bool):
                raise card_error(where, f"{k} must be true or false, got {v!r}")
        return cls(pad_id=pad_id, **flags)


def ar_loss(model, tokens: torch.Tensor, **forward_kwargs) -> tuple[torch.Tensor, dict]:
    """tokens [B,T] -> mean next-token NLL (nats/token) and metrics {loss, ppl} (0-d tensors)."""
    return ARObjective().loss(model, {"tokens": tokens}, **forward_kwargs)
