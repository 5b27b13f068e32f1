"""What a decoder records along its denoising trajectory, and the per-step callback's argument.

Every step yields a :class:`StepRecord`: the tokens after the step, which positions it committed,
the per-position confidence (probability of the drawn token) and entropy of the candidates, and,
at the steps :class:`TraceConfig` chooses, activations at chosen hook points of the model (read
through the model's own hook mechanism, :meth:`dlmlab.interp.hooks.HookedModule.cache`), each tagged with
its step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dlmlab.config import Config, require

TOP_K = 5  # alternatives kept per candidate position and step (StepRecord.top_ids / top_probs)


@dataclass
class TraceConfig(Config):
    """hooks: hook point names or globs to record (e.g. ``["blocks.0.resid_post", "blocks.*.attn.pattern"]``);
    steps: the global step indices to record them at (None: every step); logits: keep each step's block logits."""

    hooks: list[str] = field(default_factory=list)
    steps: list[int] | None = None
    logits: bool = False

    def validate(self) -> None:
        require(self.steps is None or all(s >= 0 for s in self.steps), f"trace steps must be >= 0, got {self.steps}")

    def wants(self, step: int) -> bool:
        return bool(self.hooks) and (self.steps is None or step in self.steps)


@dataclass
class Activation:
    """One hook point's activation at one step: ``value`` [len(rows), T, ...] for positions ``start .. start+T-1``
    of the rows ``rows`` (a forward runs only the rows and positions it needs)."""

    step: int
    name: str
    rows: torch.Tensor
    start: int
    value: torch.Tensor


@dataclass
class StepRecord:
    """One denoising step.  Shapes: tokens, committed, confidence, entropy [B,N] (N: prompt + generated);
    confidence / entropy are NaN where the position was not a candidate this step (entropy is summed in float32:
    within about 1e-6 nats of float64, at a fraction of the per-step cost); logits [B, block, V].
    top_ids / top_probs [B,N,k] (k = :data:`TOP_K`, or the vocabulary if smaller): the ``k`` most likely tokens
    of the distribution the step drew from at each candidate position, best first (-1 / NaN elsewhere; ranked
    in float32, probabilities read from the float64 distribution).

    kv_reuse / exact: the decoder's KV-reuse kind (``none``, ``prompt``, ``prefix``, ``dual``) and whether it is
    exact for this model and attention (:func:`~dlmlab.sampling.kv_reuse.kv_reuse_exactness`), so that a step
    computed with approximate KV reuse says so wherever the record goes.  Every record in a
    :class:`DecodeResult`'s trajectory carries them (``None`` only on a record built elsewhere and not
    yet labelled).
    """

    step: int
    block: int
    block_span: tuple[int, int]
    forwarded: bool
    tokens: torch.Tensor
    committed: torch.Tensor
    confidence: torch.Tensor
    entropy: torch.Tensor
    activations: list[Activation] = field(default_factory=list)
    logits: torch.Tensor | None = None
    kv_reuse: str | None = None
    exact: bool | None = None
    top_ids: torch.Tensor | None = None
    top_probs: torch.Tensor | None = None

    def label(self, kv_reuse: str, exactness: str) -> None:
        """Set :attr:`kv_reuse` / :attr:`exact` (``exactness``: ``"exact"`` or ``"approximate"``) where unset."""
        if self.kv_reuse is None:
            self.kv_reuse = kv_reuse
        if self.exact is None:
            self.exact = exactness == "exact"


@dataclass
class DecodeResult:
    """tokens [B,N]; steps: denoising steps taken; forwards: model calls; positions: token positions
    computed (rows x window, summed over calls); kv_reuse / exactness: the KV-reuse kind and ``"exact"`` or
    ``"approximate"``; trajectory: per-step records when asked for, each labelled with the KV reuse and
    whether it is exact (:attr:`StepRecord.kv_reuse`, :attr:`StepRecord.exact`)."""

    tokens: torch.Tensor
    steps: int
    forwards: int
    positions: int
    kv_reuse: str
    exactness: str
    trajectory: list[StepRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        for rec in self.trajectory:
            rec.label(self.kv_reuse, self.exactness)
