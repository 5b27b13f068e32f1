"""The decoder's settings: one typed dataclass, validated on construction."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Literal

from dlmlab.config import Config, ConfigError, require
from dlmlab.objectives.schedule import LinearSchedule, parse_schedule
from dlmlab.sampling.orders import ORDERS, Order

KVReuse = Literal["none", "prompt", "prefix", "dual"]
UnmaskRule = Literal["cosine", "linear", "ancestral"]
#: old field names -> new (an old name is refused with a one-line error naming the new one)
RENAMED_FIELDS: dict[str, str] = {"schedule": "unmask_rule", "cache": "kv_reuse"}
Attention = Literal["model", "block_causal"]


@dataclass
class DecodeConfig(Config):
    """How :func:`~dlmlab.sampling.decode.decode` fills masked positions.

    steps: denoising steps of a count schedule, shared among blocks by length (ignored by the
        ``threshold`` / ``factor`` rules, which take as many steps as they need).
    order: which masked positions are committed first (see :mod:`dlmlab.sampling.orders`).
    unmask_rule: how many positions each step commits: ``cosine`` or ``linear`` tokens per step (count
        rules; MaskGIT's cosine is not the cosine *noise* schedule), or ``ancestral`` (drawn; MDLM).
    noise: the noise schedule whose reveal probabilities the ``ancestral`` rule follows: a
        :class:`~dlmlab.objectives.schedule.NoiseSchedule` with its fields (e.g. ``dlmlab.load(path).noise``,
        the schedule a model was trained with), or for convenience a name (``linear``, ``loglinear``,
        ``cosine``: default fields) or ``{"name": ..., **fields}``; always a schedule object once built.
        Default: the linear schedule.
    threshold: commit every position whose score >= threshold, at least one per step (Fast-dLLM).
    factor: Fast-dLLM's factor rule instead (see :mod:`dlmlab.sampling.schedules`).
    block_len: semi-autoregressive blocks of this many positions, left to right (0: one block).
    attention: ``model`` (the model's own mask: PreDiff hybrid, MDLM bidirectional) or
        ``block_causal`` (a position sees its own block and earlier ones; the prompt is block 0).
    kv_reuse: which keys/values the sampler reuses across steps (Fast-dLLM-style caches,
        :mod:`dlmlab.sampling.kv_reuse`): ``none`` (the default: recompute every position each step; always
        exact), ``prompt`` (prompt keys/values once), ``prefix`` (prompt and finished blocks), ``dual``
        (prefix and the masked suffix).  See :func:`~dlmlab.sampling.kv_reuse.kv_reuse_exactness` for when
        each is exact: reuse other than ``none`` happens only when asked for, and every result and
        trajectory record names it and says whether it was exact.
    refresh_every: approximate KV reuse is recomputed at each block start and every this many steps.
    reuse_unchanged: reuse a row's last output when its input did not change (MDLM's cached sampler;
        exact, used only without self-conditioning).
    """

    steps: int = 8
    order: Order = "confidence"
    unmask_rule: UnmaskRule = "cosine"
    noise: Any = field(default_factory=LinearSchedule)  # NoiseSchedule (a name or a mapping is turned into one)
    threshold: float | None = None
    factor: float | None = None
    block_len: int = 0
    attention: Attention = "model"
    kv_reuse: KVReuse = "none"
    refresh_every: int = 0
    reuse_unchanged: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    self_cond: bool = True

    def derive(self) -> None:
        self.noise = parse_schedule(self.noise, "DecodeConfig.noise")

    def validate(self) -> None:
        require(self.steps >= 1, f"sampling steps must be >= 1, got {self.steps}")
        require(self.order in ORDERS, f"order must be one of {list(ORDERS)}, got {self.order!r}")
        require(self.unmask_rule in ("cosine", "linear", "ancestral"),
                f"unmask_rule must be 'cosine', 'linear' or 'ancestral', got {self.unmask_rule!r}")
        require(self.threshold is None or 0 < self.threshold <= 1,
                f"threshold must be in (0, 1], got {self.threshold}")
        require(self.factor is None or self.factor > 0, f"factor must be > 0, got {self.factor}")
        require(self.threshold is None or self.factor is None, "threshold and factor are alternatives: set one")
        require((self.threshold is None and self.factor is None) or self.order in ("confidence", "margin"),
                f"threshold / factor need order 'confidence' or 'margin' (scores in [0, 1]), got {self.order!r}")
        require(self.block_len >= 0, f"block_len must be >= 0, got {self.block_len}")
        require(self.attention in ("model", "block_causal"),
                f"attention must be 'model' or 'block_causal', got {self.attention!r}")
        require(self.kv_reuse in ("none", "prompt", "prefix", "dual"),
                f"kv_reuse must be one of none, prompt, prefix, dual, got {self.kv_reuse!r}")
        require(self.refresh_every >= 0, f"refresh_every must be >= 0, got {self.refresh_every}")
        require(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}")
        require(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def adaptive(self) -> bool:
        """True when the number of commits per step is decided by the scores (threshold / factor)."""
        return self.threshold is not None or self.factor is not None

    def to_data(self) -> dict:
        """The fields as JSON-ready data; ``noise`` is ``{"name": ..., **fields}`` (as in ``model.json``), which
        ``DecodeConfig(**data)`` reads back."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["noise"] = self.noise.to_data()
        return data


def _refuse_renamed(init):
    """``DecodeConfig(schedule=...)`` / ``(cache=...)``: a one-line :class:`~dlmlab.config.ConfigError` naming
    the new field (instead of Python's ``unexpected keyword argument``)."""

    @functools.wraps(init)
    def __init__(self, *args, **kw):
        for old, new in RENAMED_FIELDS.items():
            if old in kw:
                raise ConfigError(f"DecodeConfig.{old} was renamed {new}: use {new}={kw[old]!r}")
        init(self, *args, **kw)

    return __init__


DecodeConfig.__init__ = _refuse_renamed(DecodeConfig.__init__)
