"""Induction in both directions on sequences whose first half repeats as the second half.

Positions of a repeated sequence of length ``2*half``: position ``k`` and ``k +- half`` hold the
same token.  A *target* k is predicted from its copy (the *source*) in the other half:

* ``forward``: target in the second half, source ``k - half`` (ordinary induction);
* ``reverse``: target in the first half, source ``k + half`` (needs right-to-left access).

Targets lie at least 2 positions inside their half so that +-2 neighbours exist.

Masked (diffusion) models: one target is masked per row, and the *context* condition decides
which neighbours inside the target's half are also masked (the source half stays visible):

* ``both``:  only the target is masked;
* ``left``:  the target and everything to its right in its half are masked (left cue only);
* ``right``: the target and everything to its left in its half are masked (right cue only);
* ``neither``: the target's whole half is masked (no cue to locate the source: the no-source baseline).

``window`` offsets (e.g. ``(-1, 1)``) additionally mask those neighbours; ``far`` masks that many
random positions of the target's half at distance >= ``FAR_MIN`` from it (the control of the local
window); ``background`` masks every other position independently with that rate (a low global rate).

:func:`context_gains` scores each context by the correct token's log-probability gain over the
``neither`` baseline, per row; :func:`additivity` -> gain(both) / (gain(left) + gain(right)).

Autoregressive models: the prediction of token k is read at position k-1 (left context only);
reverse targets are then predicted without the source (it lies to the right), i.e. at chance.

The accuracy and gain measures only run the model forward (any family of
:mod:`dlmlab.models.protocol`); the head scores (:func:`dlm_induction_scores`,
:func:`ar_induction_scores`) need attention patterns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from dlmlab.analysis.heads import attention_to, diagonal_scores, model_device, row_chunks
from dlmlab.analysis.requires import require_attention
from dlmlab.objectives.mdlm import log_probs_no_mask

DIRECTIONS: tuple[str, ...] = ("forward", "reverse")
CONTEXTS: tuple[str, ...] = ("left", "right", "both")
ALL_CONTEXTS: tuple[str, ...] = CONTEXTS + ("neither",)
FAR_MIN = 4  # "far" positions are at least this far from the target


@dataclass
class InductionRows:
    """Rows of a masked induction evaluation.

    tokens [N, T] clean; noisy [N, T] with masks; target [N] position; source [N] position.
    """

    tokens: torch.Tensor
    noisy: torch.Tensor
    target: torch.Tensor
    source: torch.Tensor


def half_len(tokens: torch.Tensor) -> int:
    T = tokens.shape[1]
    if T % 2 or T < 10:
        raise ValueError(f"repeated sequences need an even length >= 10, got {T}")
    half = T // 2
    if not torch.equal(tokens[:, :half], tokens[:, half:]):
        raise ValueError("tokens are not repeated sequences (first half != second half)")
    return half


def target_range(half: int, direction: str) -> tuple[int, int]:
    """[lo, hi) of target positions for ``direction`` (2-position margin inside the half)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    start = half if direction == "forward" else 0
    return start + 2, start + half - 2


def sample_targets(n_seq: int, half: int, direction: str, per_seq: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(row index into the sequences [N], target position [N]) with ``per_seq`` distinct targets per sequence."""
    lo, hi = target_range(half, direction)
    per_seq = min(per_seq, hi - lo)
    pos = torch.rand(n_seq, hi - lo, generator=gen).argsort(dim=1)[:, :per_seq] + lo
    return torch.arange(n_seq).repeat_interleave(per_seq), pos.reshape(-1)


def build_rows(tokens: torch.Tensor, mask_id: int, direction: str, context: str = "both", per_seq: int = 8,
               window: Sequence[int] = (), background: float = 0.0, seed: int = 0, far: int = 0) -> InductionRows:
    """One masked row per (sequence, target): see the module docstring for the conditions.

    tokens [B, T] repeated sequences -> InductionRows with N = B * per_seq rows.
    Targets, background masks and far positions depend only on ``seed`` (not on ``context`` /
    ``window`` / ``far``), so conditions evaluated with the same seed are paired.
    """
    if context not in ALL_CONTEXTS:
        raise ValueError(f"context must be one of {ALL_CONTEXTS}, got {context!r}")
    if far < 0:
        raise ValueError(f"far must be >= 0, got {far}")
    if not 0.0 <= background < 1.0:
        raise ValueError(f"background mask rate must be in [0, 1), got {background}")
    half = half_len(tokens)
    T = tokens.shape[1]
    gen = torch.Generator().manual_seed(seed)
    row, k = sample_targets(tokens.shape[0], half, direction, per_seq, gen)
    bg = torch.rand(len(row), T, generator=gen) < background
    priority = torch.rand(len(row), T, generator=gen)  # far positions: the `far` eligible ones ranked first
    x = tokens[row]
    pos = torch.arange(T)[None]
    kk = k[:, None]
    start = half if direction == "forward" else 0
    in_half = (pos >= start) & (pos < start + half)
    masked = pos == kk
    if context == "left":
        masked |= (pos > kk) & in_half
    elif context == "right":
        masked |= (pos < kk) & in_half
    elif context == "neither":
        masked |= in_half
    if far:
        eligible = in_half & ((pos - kk).abs() >= FAR_MIN)
        if int(eligible.sum(1).min()) < far:
            raise ValueError(f"fewer than {far} positions at distance >= {FAR_MIN} in the target's half")
        rank = torch.where(eligible, priority, torch.full_like(priority, 2.0)).argsort(1).argsort(1)
        masked |= rank < far
    for off in window:
        if abs(off) > 2 or off == 0:
            raise ValueError(f"window offsets must be in [-2, 2] \\ {{0}}, got {off}")
        masked |= pos == kk + off
    masked |= bg
    noisy = torch.where(masked, torch.full_like(x, mask_id), x)
    source = k - half if direction == "forward" else k + half
    return InductionRows(x, noisy, k, source)


@torch.no_grad()
def _batched_logits_at(model, inputs: torch.Tensor, pos: torch.Tensor, batch: int = 512) -> torch.Tensor:
    """logits [N, V] of ``model(inputs)`` at position ``pos[n]`` of row n, in chunks."""
    outs = []
    dev = model_device(model)
    for sl in row_chunks(inputs.shape[0], batch):
        x, p = inputs[sl].to(dev), pos[sl].to(dev)
        logits = model(x)
        outs.append(logits[torch.arange(x.shape[0], device=dev), p].float().cpu())
    return torch.cat(outs)


@torch.no_grad()
def target_log_probs(model, rows: InductionRows, mask_id: int) -> torch.Tensor:
    """[N] log-probability of the correct token at each row's target (mask token excluded)."""
    was = model.training
    model.eval()
    logits = _batched_logits_at(model, rows.noisy, rows.target)
    model.train(was)
    truth = rows.tokens[torch.arange(len(rows.target)), rows.target]
    return log_probs_no_mask(logits, mask_id).gather(1, truth[:, None])[:, 0]


def context_gains(model, tokens: torch.Tensor, mask_id: int, direction: str = "forward", per_seq: int = 8,
                  seed: int = 0) -> dict[str, torch.Tensor]:
    """Per-row log-probability gains over the ``neither`` (no-source) baseline -> {left, right, both: [N]}.

    Also ``neither`` (the baseline log-probabilities [N]) and ``seq`` ([N] sequence index of each row,
    for resampling by sequence).  The rows of all contexts are paired (same targets).
    """
    lp = {c: target_log_probs(model, build_rows(tokens, mask_id, direction, c, per_seq, seed=seed), mask_id)
          for c in ALL_CONTEXTS}
    seq = torch.arange(tokens.shape[0]).repeat_interleave(len(lp["both"]) // tokens.shape[0])
    return {**{c: lp[c] - lp["neither"] for c in CONTEXTS}, "neither": lp["neither"], "seq": seq}


def additivity(gains: dict[str, torch.Tensor]) -> float:
    """mean gain(both) / (mean gain(left) + mean gain(right)); nan when the denominator is 0."""
    den = float(gains["left"].mean() + gains["right"].mean())
    return float(gains["both"].mean()) / den if den != 0 else float("nan")


def masked_accuracy(model, rows: InductionRows, mask_id: int) -> float:
    """Fraction of rows whose target is the arg-max (mask token excluded) at the target position."""
    return float(masked_correct(model, rows, mask_id).mean())


@torch.no_grad()
def masked_correct(model, rows: InductionRows, mask_id: int) -> torch.Tensor:
    """[N] 1.0 where the row's target is the arg-max (mask token excluded), else 0.0."""
    was = model.training
    model.eval()
    logits = _batched_logits_at(model, rows.noisy, rows.target)
    model.train(was)
    pred = log_probs_no_mask(logits, mask_id).argmax(-1)
    truth = rows.tokens[torch.arange(len(rows.target)), rows.target]
    return (pred == truth).float()


def per_sequence(values: torch.Tensor, n_seq: int) -> torch.Tensor:
    """[N] per-row values of rows built with ``per_seq`` rows per sequence (sequence-major) -> [n_seq] means."""
    if values.shape[0] % n_seq:
        raise ValueError(f"{values.shape[0]} rows do not split into {n_seq} sequences")
    return values.reshape(n_seq, -1).float().mean(1)


def dlm_accuracy_per_seq(model, tokens: torch.Tensor, mask_id: int, direction: str, context: str = "both",
                         per_seq: int = 8, seed: int = 0) -> torch.Tensor:
    """[B] masked-model induction accuracy of each sequence (its ``per_seq`` targets), the same rows as
    :func:`dlm_accuracy` (whose value is this vector's mean)."""
    rows = build_rows(tokens, mask_id, direction, context, per_seq, seed=seed)
    return per_sequence(masked_correct(model, rows, mask_id), tokens.shape[0])


def dlm_accuracy(model, tokens: torch.Tensor, mask_id: int, direction: str, context: str = "both",
                 per_seq: int = 8, window: Sequence[int] = (), background: float = 0.0, seed: int = 0,
                 far: int = 0) -> float:
    """Masked-model induction accuracy for one (direction, context[, window, background, far]) condition."""
    rows = build_rows(tokens, mask_id, direction, context, per_seq, window, background, seed, far)
    return masked_accuracy(model, rows, mask_id)


def ar_accuracy(model, tokens: torch.Tensor, direction: str, chunk: int = 64) -> float:
    """Causal-model next-token accuracy at all targets of ``direction`` (prediction read at k - 1)."""
    return float(ar_accuracy_per_seq(model, tokens, direction, chunk).mean())


@torch.no_grad()
def ar_accuracy_per_seq(model, tokens: torch.Tensor, direction: str, chunk: int = 64) -> torch.Tensor:
    """[B] causal-model accuracy of each sequence over all its targets of ``direction`` (read at k - 1)."""
    half = half_len(tokens)
    lo, hi = target_range(half, direction)
    was = model.training
    model.eval()
    dev = model_device(model)
    preds = [model(tokens[sl, : hi - 1].to(dev))[:, lo - 1: hi - 1].argmax(-1).cpu()
             for sl in row_chunks(tokens.shape[0], chunk)]
    model.train(was)
    return (torch.cat(preds) == tokens[:, lo:hi]).float().mean(1)


def dlm_table(model, tokens: torch.Tensor, mask_id: int, per_seq: int = 8, seed: int = 0) -> dict[str, dict[str, float]]:
    """{direction: {context: accuracy}} for a masked model."""
    return {d: {c: dlm_accuracy(model, tokens, mask_id, d, c, per_seq, seed=seed) for c in CONTEXTS} for d in DIRECTIONS}


def ar_table(model, tokens: torch.Tensor) -> dict[str, dict[str, float | None]]:
    """{direction: {context: accuracy}} for a causal model: only ``left`` exists (right/both are None)."""
    return {d: {"left": ar_accuracy(model, tokens, d), "right": None, "both": None} for d in DIRECTIONS}


def local_window(model, tokens: torch.Tensor, mask_id: int, direction: str = "forward", background: float = 0.1,
                 per_seq: int = 8, seed: int = 0) -> dict[str, float]:
    """Accuracy at a low background mask rate with the target alone / +-1 / +-2 only / +-1 and +-2 neighbours
    masked, and with two far positions (distance >= FAR_MIN) masked instead (``far2``: the control)."""
    windows = {"none": ((), 0), "pm1": ((-1, 1), 0), "pm2_only": ((-2, 2), 0), "pm1_pm2": ((-2, -1, 1, 2), 0),
               "far2": ((), 2)}
    return {name: dlm_accuracy(model, tokens, mask_id, direction, "both", per_seq, w, background, seed, far)
            for name, (w, far) in windows.items()}


def dlm_induction_scores(model, tokens: torch.Tensor, mask_id: int, direction: str = "forward", per_seq: int = 4,
                         seed: int = 0) -> torch.Tensor:
    """[L, H] attention from a masked target to its source (the copy in the other half)."""
    require_attention(model, "dlm_induction_scores", points=("pattern",))
    rows = build_rows(tokens, mask_id, direction, "both", per_seq, seed=seed)
    return attention_to(model, rows.noisy, rows.target, rows.source)


def ar_induction_scores(model, tokens: torch.Tensor) -> torch.Tensor:
    """[L, H] TransformerLens induction score: attention from query q >= half to key q - half + 1."""
    require_attention(model, "ar_induction_scores", points=("pattern",))
    half = half_len(tokens)
    return diagonal_scores(model, tokens, -(half - 1), min_query=half)
