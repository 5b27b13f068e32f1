"""One training objective abstraction: ``make_batch`` draws the randomness, ``loss`` scores a model on it.

An :class:`Objective` turns clean tokens into a training batch and a batch into a loss::

    obj = MaskedDiffusionObjective(mask_id, LinearSchedule())
    batch = obj.make_batch(tokens, gen)        # {"tokens", "t", "noise"}: every draw made here, on the CPU
    loss, metrics = obj.loss(model, batch)     # the MDLM NELBO per token

``make_batch(tokens, gen, **extra)`` draws from ``gen`` only (so :func:`dlmlab.training.train`'s
per-step generator makes a resumed or sharded run see the same draws) and passes ``extra`` tensors
(e.g. ``labels``) through into the batch.  ``loss(model, batch)`` returns ``(loss, metrics)``, what
:func:`~dlmlab.training.train`'s ``loss_fn`` returns; the batch is moved to the model's device.

* :class:`ARObjective`: next-token cross-entropy (``tokens`` [B, T+1]), optionally ignoring a pad id,
  averaged per row or per token.
* :class:`MaskedDiffusionObjective`: absorbing-mask diffusion (MDLM); times ``t`` drawn from its
  :class:`~dlmlab.objectives.schedule.NoiseSchedule` on ``[t_min, 1]``, or uniformly on ``t_range``
  (antithetic either way), one uniform per token for the masks.
* :class:`TaggingObjective`: per-position labels (``batch["labels"]`` [B, T]) read off the model's logits.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from dlmlab.config import require
from dlmlab.objectives.mdlm import mdlm_loss
from dlmlab.objectives.schedule import NoiseSchedule, get_schedule, uniform_times

Batch = dict[str, torch.Tensor]


@runtime_checkable
class Objective(Protocol):
    """What every training objective offers (see the module docstring)."""

    name: str

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None, **extra: torch.Tensor) -> Batch: ...

    def loss(self, model, batch: Batch) -> tuple[torch.Tensor, dict]: ...


def model_device(model) -> torch.device:
    """The device of the model's first parameter (CPU for a model without parameters)."""
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def token_nll(logits: torch.Tensor, targets: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Cross-entropy [B, T] of ``targets`` [B, T] under ``logits`` [B, T, V] (computed in ``dtype`` when given)."""
    logits = logits if dtype is None else logits.to(dtype)
    return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")


class ARObjective:
    """Next-token prediction on ``batch["tokens"]`` [B, T+1]: the model reads ``tokens[:, :-1]`` and predicts
    ``tokens[:, 1:]``.

    ``pad_id``: targets equal to it are ignored.  ``per_row``: the mean over each row's (non-pad) targets,
    then over rows (every row weighs the same, so a batch split over ranks averages to the whole batch's
    loss); otherwise the mean over all (non-pad) targets of the batch.  ``float32``: score float32 logits
    (``.float()`` of the model's).
    """

    name = "ar"

    def __init__(self, pad_id: int | None = None, per_row: bool = False, float32: bool = False) -> None:
        self.pad_id, self.per_row, self.float32 = pad_id, per_row, float32

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None = None, **extra: torch.Tensor) -> Batch:
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
        return loss, {"loss": loss.item(), "ppl": float(torch.exp(loss.detach()))}


class MaskedDiffusionObjective:
    """Absorbing-mask diffusion (MDLM): batch ``{"tokens", "t", "noise"}``, loss the NELBO per token.

    ``schedule``: the :class:`~dlmlab.objectives.schedule.NoiseSchedule` (a name, an instance, or None for the
    default linear one): mask probability and ELBO weight of ``t``, and where ``t`` is drawn, ``[t_min, 1]``.
    ``t_range`` ``(lo, hi)``: draw ``t`` uniformly on ``[lo, hi]`` instead (antithetic, as the schedule's own
    draw), e.g. the induction study's narrower mask rates.  ``pad_id``: tokens equal to it are never masked
    and not counted.
    """

    name = "mdlm"

    def __init__(self, mask_id: int, schedule: "NoiseSchedule | str | None" = None,
                 t_range: tuple[float, float] | None = None, pad_id: int | None = None) -> None:
        require(isinstance(mask_id, int) and mask_id >= 0, f"mask_id must be a token id >= 0, got {mask_id!r}")
        if t_range is not None:
            lo, hi = t_range
            require(0.0 <= lo < hi <= 1.0, f"t_range must satisfy 0 <= lo < hi <= 1, got {t_range}")
        self.mask_id, self.schedule, self.t_range, self.pad_id = mask_id, get_schedule(schedule), t_range, pad_id

    def sample_t(self, batch: int, gen: torch.Generator | None) -> torch.Tensor:
        """Times [B]: the schedule's draw on ``[t_min, 1]``, or uniform on ``t_range`` (both antithetic)."""
        if self.t_range is None:
            return self.schedule.sample_t(batch, gen)
        lo, hi = self.t_range
        return lo + (hi - lo) * uniform_times(batch, gen)

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None, **extra: torch.Tensor) -> Batch:
        """``tokens`` [B, T] -> ``{"tokens", "t" [B], "noise" [B, T] uniforms, **extra}`` (t drawn first)."""
        t = self.sample_t(tokens.shape[0], gen)
        return {"tokens": tokens, "t": t, "noise": torch.rand(tokens.shape, generator=gen), **extra}

    def loss(self, model, batch: Batch, **forward_kwargs) -> tuple[torch.Tensor, dict]:
        dev = model_device(model)
        x = batch["tokens"].to(dev)
        maskable = x != self.pad_id if self.pad_id is not None else None
        return mdlm_loss(model, x, self.mask_id, t=batch["t"].to(dev), noise=batch["noise"].to(dev),
                         maskable=maskable, schedule=self.schedule, **forward_kwargs)


class TaggingObjective:
    """Per-position classification: ``batch["labels"]`` [B, T] read off ``model(batch["tokens"])`` [B, T, C];
    float32 cross-entropy over every position, with the accuracy as a metric."""

    name = "tagging"

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None = None, **extra: torch.Tensor) -> Batch:
        require("labels" in extra, "a tagging batch needs labels")
        return {"tokens": tokens, **extra}

    def loss(self, model, batch: Batch) -> tuple[torch.Tensor, dict]:
        dev = model_device(model)
        labels = batch["labels"].to(dev)
        logits = model(batch["tokens"].to(dev))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        acc = (logits.argmax(-1) == labels).float().mean()
        return loss, {"loss": float(loss.detach()), "acc": float(acc)}


__all__ = ["Objective", "ARObjective", "MaskedDiffusionObjective", "TaggingObjective", "token_nll"]
