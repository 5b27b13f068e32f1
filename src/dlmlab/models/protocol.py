"""The one model protocol every dlmlab sequence model follows (Transformer, Mamba, Mamba-2, LSTM, GRU).

Forward
    ``model(tokens, **kw) -> logits``: tokens [B,T] int64 (or int32) ids in ``[0, vocab_size)``,
    logits [B,T,V] (V = ``n_out`` for a tagger).  Bad tokens raise
    :class:`~dlmlab.models.checks.ModelInputError` (a ``UserError`` and a ``ValueError``).
    Every family accepts the keywords of :data:`COMMON_KEYWORDS` (keyword-only):

    * ``attn_mask``: ``None`` (the model's default), ``"causal"``, ``"bidirectional"``,
      ``"hybrid"`` or a boolean "may attend" tensor.  Attention models honour all of them;
      the causal families (Mamba, Mamba-2, LSTM, GRU) accept ``None`` / ``"causal"`` (what
      they compute) and refuse the rest with a one-line error;
    * ``prompt_len``: int or [B] tensor, used by ``"hybrid"`` only (ignored otherwise);
    * ``embed_add``: [B,T,D] added to the input embedding (time / self-conditioning inputs);
    * ``kv_cache``: a :class:`~dlmlab.models.kv_cache.KVCache` (attention models); refused by
      the others.

Hook points (:data:`RESIDUAL_POINTS`, present on every family; shapes [B,T,D] unless noted)
    * ``embed``: the token embedding (Transformer: before positions are added);
    * ``blocks.{i}.resid_pre``: the input of block i (block 0: embedding + positions + embed_add);
    * ``blocks.{i}.mixer_out``: what the block's token mixer (attention, SSM mixer, LSTM/GRU
      layer) outputs;
    * ``blocks.{i}.resid_post``: the output of block i;
    * ``final``: after the final norm; ``logits`` [B,T,V].

    ``model.residual_stream`` says how they relate.  True: a residual stream,
    ``resid_post = resid_pre + mixer_out (+ mlp_out)`` (Transformer with an MLP: ``resid_mid =
    resid_pre + mixer_out`` and ``resid_post = resid_mid + mlp_out``).  False (the plain LSTM /
    GRU stack, ``residual=False``): no skip connection; ``resid_pre`` / ``resid_post`` are the
    layer's input and output, ``resid_post == mixer_out``, and the width is ``d_model`` at
    ``blocks.0.resid_pre`` and ``hidden_size`` after.

    Family-specific points sit beside them (:data:`FAMILY_POINTS`): attention points
    (``blocks.{i}.attn.q|k|v|pattern|z|head_out``, ``attn_out`` = ``mixer_out``, ``resid_mid``,
    ``mlp_out``, ``mlp.post``, ``pos_embed``) only on attention models; ``mixer.conv_out``,
    ``mixer.dt``, ``mixer.ssm_out`` on Mamba / Mamba-2; ``rnn_out`` (= ``mixer_out``) on LSTM / GRU.

Family and flags
    ``model.family`` (= ``model.cfg.family``): one of :data:`FAMILIES`; ``model.residual_stream``
    (above); ``model.supports_kv_cache``: whether ``forward(kv_cache=...)`` is accepted.

Methods (:class:`ProtocolMethods`, which every family inherits; what the interpretability core,
:mod:`dlmlab.interp`, asks a model, so that it imports no model)
    * ``model.has_attention()``: whether every block has attention heads (``blocks.{i}.attn.*``);
    * ``model.norm_scale(norm, x)`` [...]: the per-token scale one of the model's norms divides
      ``x`` [..., D] by, and ``model.scale_like_norm(norm, x, scale, weight=True)`` [..., D]:
      ``w * P x / scale`` (``weight=False``: ``P x / scale``; :mod:`dlmlab.models.norm_scale`);
    * ``model.family_name``: how messages name the model ("Transformer", "Mamba-2", ...).

:func:`protocol_problems` lists what a model lacks; :func:`check_protocol` raises on the first.
This module imports no model, so models and analyses can both import it.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import torch

from dlmlab.errors import UserError
from dlmlab.models import norm_scale as _norm_scale

FAMILIES: tuple[str, ...] = ("transformer", "mamba", "mamba2", "lstm", "gru")
FAMILY_NAMES: dict[str, str] = {"transformer": "Transformer", "mamba": "Mamba", "mamba2": "Mamba-2",
                                "lstm": "LSTM", "gru": "GRU"}
COMMON_KEYWORDS: tuple[str, ...] = ("attn_mask", "prompt_len", "embed_add", "kv_cache")
PROTOCOL_METHODS: tuple[str, ...] = ("has_attention", "norm_scale", "scale_like_norm")
MODEL_POINTS: tuple[str, ...] = ("embed", "final", "logits")
BLOCK_POINTS: tuple[str, ...] = ("resid_pre", "mixer_out", "resid_post")
RESIDUAL_POINTS: tuple[str, ...] = ("embed", "blocks.{i}.resid_pre", "blocks.{i}.mixer_out",
                                    "blocks.{i}.resid_post", "final", "logits")
ATTENTION_POINTS: tuple[str, ...] = ("q", "k", "v", "pattern", "z", "head_out")
FAMILY_POINTS: dict[str, tuple[str, ...]] = {
    "transformer": ("blocks.{i}.attn_out",) + tuple(f"blocks.{{i}}.attn.{p}" for p in ATTENTION_POINTS),
    "mamba": ("blocks.{i}.mixer.conv_out", "blocks.{i}.mixer.dt", "blocks.{i}.mixer.ssm_out"),
    "mamba2": ("blocks.{i}.mixer.conv_out", "blocks.{i}.mixer.dt", "blocks.{i}.mixer.ssm_out"),
    "lstm": ("blocks.{i}.rnn_out",),
    "gru": ("blocks.{i}.rnn_out",),
}


class ProtocolError(UserError, TypeError):
    """A model that does not follow the protocol (the message names what is missing)."""


@runtime_checkable
class SequenceModel(Protocol):
    """What every dlmlab sequence model provides (see the module docstring)."""

    family: str
    residual_stream: bool
    supports_kv_cache: bool
    blocks: Sequence[torch.nn.Module]

    @property
    def hook_points(self) -> dict[str, Any]: ...

    def forward(self, tokens: torch.Tensor, **kw: Any) -> torch.Tensor: ...

    def cache(self, names: Any = None, detach: bool = True) -> Iterator[dict[str, torch.Tensor]]: ...

    def replace(self, values: Mapping[str, Any]) -> Iterator[None]: ...

    def add(self, values: Mapping[str, torch.Tensor]) -> Iterator[None]: ...

    def hooks(self, fns: Mapping[str, Any]) -> Iterator[None]: ...

    def run_with_cache(self, tokens: torch.Tensor, names: Any = None, **kw: Any) -> tuple[torch.Tensor, Any]: ...

    def has_attention(self) -> bool: ...

    def norm_scale(self, norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor: ...

    def scale_like_norm(self, norm: torch.nn.Module, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor: ...


class ProtocolMethods:
    """The protocol's methods (see the module docstring), inherited by every family."""

    @property
    def family_name(self) -> str:
        """How messages name this model: "Transformer", "Mamba-2", ... (else its class name)."""
        return family_name(self)

    def has_attention(self) -> bool:
        """True when every block has an attention module exposing ``blocks.{i}.attn.*`` hook points."""
        return _attention_in_every_block(self)

    def norm_scale(self, norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The per-token scale [...] that ``norm`` (one of this model's norms) divides ``x`` [..., D] by
        (:func:`dlmlab.models.norm_scale.norm_scale`)."""
        return _norm_scale.norm_scale(norm, x)

    def scale_like_norm(self, norm: torch.nn.Module, x: torch.Tensor, scale: torch.Tensor,
                        weight: bool = True) -> torch.Tensor:
        """``w * P x / scale`` [..., D] for ``x`` [..., D] and a ``scale`` broadcastable to ``x.shape[:-1]``
        (``weight=False``: ``P x / scale``; :func:`dlmlab.models.norm_scale.scale_like_norm`)."""
        return _norm_scale.scale_like_norm(norm, x, scale, weight)


def family_of(model) -> str | None:
    """``model.family`` (or ``model.cfg.family``); None when the model states none."""
    fam = getattr(model, "family", None)
    if fam is None:
        fam = getattr(getattr(model, "cfg", None), "family", None)
    return fam if isinstance(fam, str) else None


def family_name(model) -> str:
    """How messages name the model: "Transformer", "Mamba-2", ... (else its class name)."""
    fam = family_of(model)
    return FAMILY_NAMES.get(fam, fam) if fam else type(model).__name__


def n_blocks(model) -> int:
    return len(getattr(model, "blocks", ()))


def residual_point_names(model) -> list[str]:
    """The protocol's residual hook names for this model's depth, in forward order."""
    names = ["embed"]
    for i in range(n_blocks(model)):
        names += [f"blocks.{i}.{p}" for p in BLOCK_POINTS]
    return names + ["final", "logits"]


def has_attention(model) -> bool:
    """``model.has_attention()`` where the model has the protocol's method, else whether every block has an
    attention module exposing ``blocks.{i}.attn.*`` hook points."""
    method = getattr(model, "has_attention", None)
    return bool(method()) if callable(method) else _attention_in_every_block(model)


def _attention_in_every_block(model) -> bool:
    blocks = getattr(model, "blocks", None)
    if not blocks:
        return False
    points = getattr(model, "hook_points", {})
    return all(getattr(b, "attn", None) is not None and f"blocks.{i}.attn.z" in points for i, b in enumerate(blocks))


def _forward_keywords(model) -> tuple[bool, list[str]]:
    """(takes tokens first, the common keywords its forward does not accept)."""
    try:
        sig = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return True, []
    params = list(sig.parameters.values())
    first = bool(params) and params[0].kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                 inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return first, []
    return first, [k for k in COMMON_KEYWORDS if k not in sig.parameters]


def protocol_problems(model) -> list[str]:
    """What ``model`` lacks of the protocol (empty when it follows it)."""
    problems = []
    fam = family_of(model)
    if fam is None:
        problems.append("no family (model.family or model.cfg.family)")
    for flag in ("residual_stream", "supports_kv_cache"):
        if not isinstance(getattr(model, flag, None), bool):
            problems.append(f"no {flag} flag (bool)")
    if getattr(model, "blocks", None) is None:
        problems.append("no blocks")
    points = getattr(model, "hook_points", None)
    if not isinstance(points, dict):
        return problems + ["no hook_points (a dlmlab.interp.hooks.HookedModule)"]
    missing = [n for n in residual_point_names(model) if n not in points]
    if missing:
        problems.append(f"missing hook points {', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}")
    absent_methods = [m for m in PROTOCOL_METHODS if not callable(getattr(model, m, None))]
    if absent_methods:
        problems.append(f"no {', '.join(absent_methods)} methods (inherit dlmlab.models.protocol.ProtocolMethods)")
    attention_points = [n for n in points if re.match(r"^blocks\.\d+\.attn\.", n)]
    if attention_points and not has_attention(model):
        problems.append(f"attention hook points ({attention_points[0]}) without an attention module in every block")
    first, absent = _forward_keywords(model)
    if not first:
        problems.append("forward does not take tokens as its first argument")
    if absent:
        problems.append(f"forward does not accept the common keywords {', '.join(absent)}")
    return problems


def check_protocol(model) -> None:
    """Raise :class:`ProtocolError` naming what ``model`` lacks of the protocol."""
    problems = protocol_problems(model)
    if problems:
        raise ProtocolError(f"{type(model).__name__} does not follow the dlmlab model protocol: {'; '.join(problems)}")
