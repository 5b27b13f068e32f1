"""One training objective abstraction: ``make_batch`` draws the randomness, ``loss`` scores a model on it, and
the objective writes itself into the run's ``model.json`` (``to_card``) and is read back from it (``from_card``).

An :class:`Objective` turns clean tokens into a training batch and a batch into a loss::

    obj = MaskedDiffusionObjective(mask_id, LinearSchedule())
    batch = obj.make_batch(tokens, gen)        # {"tokens", "t", "noise"}: every draw made here, on the CPU
    loss, metrics = obj.loss(model, batch)     # the MDLM NELBO per token; metrics are 0-d tensors
    obj.to_card()                              # {"objective": "mdlm", "mask_id": ..., "noise": {...}, ...}

``make_batch(tokens, gen, step=0, **extra)`` draws from ``gen`` only (so :func:`dlmlab.training.train`'s
per-step generator makes a resumed or sharded run see the same draws), passes ``extra`` tensors (e.g.
``labels``) through into the batch, and reads ``step`` where the objective changes over training (an
annealed attention mask).  ``loss(model, batch)`` returns ``(loss, metrics)`` with the metrics as detached
tensors (no host sync: the training loop converts them on logged steps only); the batch is moved to the
model's device.

The objectives (each in its module, all exported by :mod:`dlmlab.objectives`): :class:`ARObjective` (``ar``),
:class:`MaskedDiffusionObjective` (``mdlm``), :class:`GivenMaskObjective` (``given_mask``),
:class:`TaggingObjective` (``tagging``), :class:`PrefixDiffusionObjective` (``prefix_diffusion``);
:func:`objective_from_card` reads any of them back.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from dlmlab.config import ConfigError
from dlmlab.errors import UserError

Batch = dict[str, torch.Tensor]


@runtime_checkable
class Objective(Protocol):
    """What every training objective offers (see the module docstring)."""

    name: str

    def make_batch(self, tokens: torch.Tensor, gen: torch.Generator | None, step: int = 0,
                   **extra: torch.Tensor) -> Batch: ...

    def loss(self, model, batch: Batch) -> tuple[torch.Tensor, dict]: ...

    def to_card(self) -> dict: ...


class CardObjective:
    """Base of the toolkit's objectives (dataclasses): equality, and what the pipeline asks an objective
    instead of branching on its name.

    Two objectives are equal when they are of one class and write the same card; an objective also equals its
    ``name`` (so ``dlmlab.load(run).objective == "mdlm"``, written when that field was a string, still holds).

    * ``shift_logits``: the logits at position ``i`` predict token ``i + 1`` (next-token objectives);
    * ``added_ids``: how many ids the objective adds past the tokenizer's vocabulary (1 for the mask token of
      masked diffusion), and :meth:`for_vocab` assigns them once the vocabulary is known;
    * ``denoises``: the model fills in masked positions (a transformer then needs bidirectional attention,
      it is evaluated by its NELBO bound and decoded by unmasking); else it is scored by its exact NLL;
    * ``next_token``: the loss is the next-token cross-entropy over every position of a row (the AR
      objective), so one forward of the tokens gives it (TransformerLens's ``return_type="loss"``);
    * :meth:`window`: the tokens a training / evaluation row holds for ``seq_len`` predicted positions;
    * :meth:`evaluate`: held-out NLL or NELBO bound of a model on fixed windows.

    A user's objective subclasses this (a dataclass), defines ``name``, ``make_batch``, ``loss``, ``to_card``
    and ``from_card``, and is registered with :func:`dlmlab.objectives.register_objective`.
    """

    name: ClassVar[str] = "objective"
    shift_logits: ClassVar[bool] = False
    added_ids: ClassVar[int] = 0
    denoises: ClassVar[bool] = False
    next_token: ClassVar[bool] = False
    mask_id: int | None = None

    def for_vocab(self, data_vocab: int) -> "CardObjective":
        """This objective with the ids it adds assigned, for a tokenizer of ``data_vocab`` ids (the model's
        vocabulary is ``data_vocab + added_ids``); an objective that adds none returns itself."""
        return self

    def window(self, seq_len: int) -> int:
        """Tokens per row for ``seq_len`` predicted positions: ``seq_len + 1`` for next-token objectives."""
        return seq_len + (1 if self.shift_logits else 0)

    def eval_metrics(self, nll: float) -> dict:
        """``{"nelbo", "ppl_bound"}`` (a bound: denoising objectives) or ``{"nll", "ppl"}`` of a mean ``nll``."""
        if self.denoises:
            return {"nelbo": nll, "ppl_bound": math.exp(nll)}
        return {"nll": nll, "ppl": math.exp(nll)}

    @torch.no_grad()
    def evaluate(self, model, chunks: torch.Tensor, seq_len: int, batch_size: int, seed: int = 1234) -> dict:
        """Mean loss of ``model`` over the held-out ``chunks`` [N, >= window(seq_len)] in batches of
        ``batch_size`` (each row cut to :meth:`window`; draws from one generator seeded ``seed``), as
        :meth:`eval_metrics`."""
        g = torch.Generator().manual_seed(seed)
        w = self.window(seq_len)
        losses = [self.loss(model, self.make_batch(xb[:, :w], g))[0].item() for xb in chunks.split(batch_size)]
        return self.eval_metrics(sum(losses) / len(losses))

    def to_card(self) -> dict:  # pragma: no cover - every objective defines its own
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other == self.name
        return type(other) is type(self) and self.to_card() == other.to_card()

    def __hash__(self) -> int:
        return hash(self.name)


def model_device(model) -> torch.device:
    """The device of the model's first parameter (CPU for a model without parameters)."""
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def token_nll(logits: torch.Tensor, targets: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Cross-entropy [B, T] of ``targets`` [B, T] under ``logits`` [B, T, V] (computed in ``dtype`` when given)."""
    logits = logits if dtype is None else logits.to(dtype)
    return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")


def step_batch(objective: Objective, data: torch.Tensor | dict, gen: torch.Generator | None, step: int = 0) -> Batch:
    """The objective's batch of one step's clean ``data``: tokens [B, ...], or a dict of ``tokens`` and extra
    tensors (``labels``, query positions ...) passed to ``make_batch`` by name."""
    if isinstance(data, dict):
        if "tokens" not in data:
            raise UserError(f"a batch dict needs its 'tokens'; got keys {sorted(data)}")
        return objective.make_batch(gen=gen, step=step, **data)
    return objective.make_batch(data, gen, step=step)


def check_t_range(t_range: Any, where: str = "t_range") -> tuple[float, float]:
    """``(lo, hi)`` with ``0 <= lo < hi <= 1`` (the masked-diffusion objective's own check); a one-line
    :class:`~dlmlab.config.ConfigError` naming ``where`` otherwise."""
    try:
        lo, hi = (float(v) for v in t_range)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be two numbers [lo, hi], got {t_range!r}") from None
    if not 0.0 <= lo < hi <= 1.0:
        raise ConfigError(f"{where} must satisfy 0 <= lo < hi <= 1, got {[lo, hi]}")
    return lo, hi


def field_where(where: str, key: str) -> str:
    """Where a card's field ``key`` is: ``objective.noise`` in a config section (``where`` a dotted name),
    ``PATH/model.json: noise`` in a file."""
    return f"{where}.{key}" if all(p.isidentifier() for p in where.split(".")) else f"{where}: {key}"


def card_error(where: str, e: Exception) -> UserError:
    """A bad objective in a card: one line naming the file (``where``)."""
    return UserError(f"{where}: {e}")


__all__ = ["Objective", "CardObjective", "Batch", "model_device", "token_nll", "step_batch", "check_t_range",
           "field_where"]
