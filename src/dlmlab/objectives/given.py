"""Training at given positions: :class:`GivenMaskObjective` (the reversal study's forward-only queries)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from dlmlab.config import ConfigError, require
from dlmlab.models.precision import upcast
from dlmlab.objectives.objective import Batch, CardObjective, card_error, model_device


@dataclass(eq=False)
class GivenMaskObjective(CardObjective):
    """The NLL of ``batch["target"]`` [B] read at ``batch["query_pos"]`` [B] of ``batch["tokens"]`` [B, T]: one
    position per row, chosen by the data rather than drawn.

    A masked model (``mask_id`` given) reads the mask token there: ``make_batch`` writes ``mask_id`` at each
    query position (e.g. "[M] r.. B" -> A, the reversal study's forward query).  A causal model (``mask_id``
    None) predicts the next token from the query position (e.g. "A r.." -> B read at the last position).
    The loss is the mean over rows of ``-log softmax(logits[b, query_pos[b]])[target[b]]`` in at least float32
    (:func:`dlmlab.models.precision.upcast`); other ``extra`` tensors pass through.
    Card: ``{"objective": "given_mask", "mask_id"}``.
    """

    mask_id: int | None = None

    name: ClassVar[str] = "given_mask"

    def __post_init__(self) -> None:
        require(self.mask_id is None or (isinstance(self.mask_id, int) and self.mask_id >= 0),
                f"mask_id must be a token id >= 0 or None, got {self.mask_id!r}")

    @property
    def shift_logits(self) -> bool:  # a causal query predicts the token after its position
        return self.mask_id is None

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None = None, step: int = 0,
                   **extra: torch.Tensor) -> Batch:
        """``tokens`` [B, T] with ``query_pos`` [B] and ``target`` [B] in ``extra`` (nothing is drawn)."""
        require("query_pos" in extra and "target" in extra, "a given-mask batch needs query_pos and target")
        if self.mask_id is not None:
            rows = torch.arange(tokens.shape[0])
            if not bool((tokens[rows, extra["query_pos"]] == self.mask_id).all()):
                tokens = tokens.clone()
                tokens[rows, extra["query_pos"]] = self.mask_id
        return {"tokens": tokens, **extra}

    def loss(self, model, batch: Batch, **forward_kwargs) -> tuple[torch.Tensor, dict]:
        dev = model_device(model)
        tokens, pos, target = (batch[k].to(dev) for k in ("tokens", "query_pos", "target"))
        logits = model(tokens, **forward_kwargs)  # [B, T, V]
        at = upcast(logits[torch.arange(len(pos), device=logits.device), pos])  # [B, V]
        loss = -at.log_softmax(-1).gather(1, target[:, None]).mean()
        return loss, {"loss": loss.detach()}

    def to_card(self) -> dict:
        return {"objective": self.name, "mask_id": self.mask_id}

    @classmethod
    def from_card(cls, card: dict, where: str = "model.json") -> "GivenMaskObjective":
        try:
            return cls(card.get("mask_id"))
        except ConfigError as e:
            raise card_error(where, e) from None
