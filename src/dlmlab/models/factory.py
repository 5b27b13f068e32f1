"""Build any toolkit sequence model by architecture name, with matched parameter counts.

``build_model(arch, vocab_size=V, n_out=K, d_model=128, n_layers=4, **overrides)``
returns a :class:`~dlmlab.interp.hooks.HookedModule` mapping tokens [B,T] -> logits [B,T,K] that
follows :mod:`dlmlab.models.protocol` (``arch`` is its ``family``): the same forward keywords,
the hook points ``embed``, ``blocks.{i}.resid_pre|mixer_out|resid_post``, ``final`` and
``logits``, plus architecture-specific ones (see docs/models.md).

Parameter matching: the transformer (``d_mlp = 4 d_model``, 4 heads, learned positions
up to ``max_seq_len=256``) is the reference.  Unless the width is given in
``overrides`` (or ``match_params=False``), each other architecture's width knob is
chosen so its total parameter count is the closest to the reference's for the same
``vocab_size, n_out, d_model, n_layers``:

* mamba:  ``d_inner`` (expand = d_inner / d_model; d_state 16, d_conv 4)
* mamba2: ``d_inner`` in multiples of ``headdim`` (32; d_state 64)
* lstm / gru: ``hidden_size`` (embedding width stays ``d_model``)

This module is the one place where omitted fields get their defaults and widths are matched:
:func:`model_config` does both, :func:`build_model` builds what it returns, and ``dlmlab train``
reads a YAML ``model`` section through :func:`section_config` (the same call), so a section and the
same keywords to :func:`build_model` give the same model (same seed: same weights).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch
from torch import nn

from dlmlab.config import ConfigError, from_dict
from dlmlab.interp.hooks import HookedModule

from dlmlab.models.protocol import FAMILIES

ARCHITECTURES: tuple[str, ...] = FAMILIES

# width knob per architecture (solved when matching parameter counts)
_WIDTH_KNOB = {"mamba": "d_inner", "mamba2": "d_inner", "lstm": "hidden_size", "gru": "hidden_size"}
# overrides that also fix the width, so no matching happens
_WIDTH_ALIASES = {"mamba": ("d_inner", "expand"), "mamba2": ("d_inner", "expand"),
                  "lstm": ("hidden_size",), "gru": ("hidden_size",)}


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _arch_classes(arch: str) -> tuple[type, type, dict[str, Any]]:
    """(config class, model class, default fields) for ``arch``."""
    if arch == "transformer":
        from dlmlab.models.config import TransformerConfig
        from dlmlab.models.transformer import Transformer

        return TransformerConfig, Transformer, {"n_heads": 4, "mlp": "gelu_new", "max_seq_len": 256}
    if arch in ("lstm", "gru"):
        from dlmlab.models.recurrent import RecurrentConfig, RecurrentModel

        return RecurrentConfig, RecurrentModel, {"cell": arch}
    if arch == "mamba":
        from dlmlab.models.mamba import Mamba, MambaConfig

        return MambaConfig, Mamba, {}
    if arch == "mamba2":
        from dlmlab.models.mamba2 import Mamba2, Mamba2Config

        return Mamba2Config, Mamba2, {}
    raise ConfigError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")


def config_class(family: str) -> type:
    """The config dataclass of ``family`` (TransformerConfig, MambaConfig, Mamba2Config, RecurrentConfig)."""
    return _arch_classes(family)[0]


def model_config(arch: str, *, vocab_size: int, n_out: int = 0, d_model: int = 128, n_layers: int = 4,
                 match_params: bool = True, **overrides: Any):
    """The validated config dataclass :func:`build_model` would use."""
    cfg_cls, _, defaults = _arch_classes(arch)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
        raise ConfigError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    if isinstance(n_out, bool) or not isinstance(n_out, int) or n_out < 0:
        raise ConfigError(f"n_out must be an integer >= 0 (0 -> vocab_size), got {n_out!r}")
    for name, v in (("d_model", d_model), ("n_layers", n_layers)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    fields = {f.name for f in dataclasses.fields(cfg_cls)}
    base = dict(defaults, vocab_size=vocab_size, n_out=n_out, d_model=d_model, n_layers=n_layers)
    if arch == "transformer":
        base["d_mlp"] = 4 * d_model
    base = {k: v for k, v in base.items() if k in fields}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ConfigError(f"unknown {arch} option {unknown[0]!r} (allowed: {', '.join(sorted(fields))})")
    base.update(overrides)
    if match_params and matches_width(arch, overrides):
        knob = _WIDTH_KNOB[arch]
        target = count_config_params("transformer", model_config(
            "transformer", vocab_size=vocab_size, n_out=n_out, d_model=d_model, n_layers=n_layers))
        base[knob] = _solve_width(arch, base, knob, target)
    return from_dict(cfg_cls, base)


def matches_width(arch: str, fields: Mapping[str, Any]) -> bool:
    """True when :func:`model_config` solves ``arch``'s width for these fields (none of them fixes it)."""
    return arch in _WIDTH_KNOB and not any(k in fields for k in _WIDTH_ALIASES[arch])


def section_config(section: Mapping[str, Any], vocab_size: int, where: str = "model"):
    """The model config of a run config's ``model`` section *as written* (``family``, default transformer,
    plus the fields given), for a model of ``vocab_size`` ids: ``model_config(family, vocab_size=vocab_size,
    **fields)``, i.e. what ``build_model(family, vocab_size=vocab_size, **fields)`` builds (the factory's
    defaults for omitted fields; the width matched unless given).  ``vocab_size`` 0 in the section
    (from the tokenizer) is left out; ``cell`` of lstm / gru is the family.  Errors name ``where``."""
    fields = dict(section)
    family = fields.pop("family", "transformer")
    if family in ("lstm", "gru") and fields.get("cell", family) == family:
        fields.pop("cell", None)
    if not fields.get("vocab_size"):
        fields.pop("vocab_size", None)
    else:
        vocab_size = fields.pop("vocab_size")
    try:
        return model_config(family, vocab_size=vocab_size, **fields)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def build_model(arch: str, *, vocab_size: int, n_out: int = 0, d_model: int = 128, n_layers: int = 4,
                match_params: bool = True, **overrides: Any) -> HookedModule:
    """Build a model; see the module docstring.  ``overrides`` are fields of the arch's config."""
    cfg = model_config(arch, vocab_size=vocab_size, n_out=n_out, d_model=d_model, n_layers=n_layers,
                       match_params=match_params, **overrides)
    _, model_cls, _ = _arch_classes(arch)
    return model_cls(cfg)


def count_config_params(arch: str, cfg) -> int:
    """Parameter count of the model ``cfg`` describes (built on the meta device: no memory)."""
    _, model_cls, _ = _arch_classes(arch)
    with torch.device("meta"):
        return count_params(model_cls(cfg))


_WIDTHS: dict[tuple, int] = {}  # solved widths by (arch, knob, target, config fields): a solve builds ~10 models


def _solve_width(arch: str, base: dict, knob: str, target: int) -> int:
    """Width (multiple of ``step``) whose parameter count is closest to ``target`` (memoised)."""
    try:
        key = (arch, knob, target, tuple(sorted(base.items())))
        hash(key)
    except TypeError:  # an unhashable field value: solve without the memo
        return _solve_width_uncached(arch, base, knob, target)
    if key not in _WIDTHS:
        _WIDTHS[key] = _solve_width_uncached(arch, base, knob, target)
    return _WIDTHS[key]


def _solve_width_uncached(arch: str, base: dict, knob: str, target: int) -> int:
    cfg_cls, _, _ = _arch_classes(arch)
    step = int(base.get("headdim", 32)) if arch == "mamba2" else 1

    fixed = {"use_conv": True} if arch == "mamba" else {}  # conv ablation keeps the width

    def count(w: int) -> int:
        return count_config_params(arch, from_dict(cfg_cls, dict(base, **fixed, **{knob: w * step})))

    lo, hi = 1, 2
    while count(hi) < target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # count is increasing in w: find the last w with count < target
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid) < target else (lo, mid)
    best = min((lo, hi), key=lambda w: abs(count(w) - target))
    return best * step


def param_table(vocab_size: int, n_out: int = 0, d_model: int = 128, n_layers: int = 4,
                archs: tuple[str, ...] = ARCHITECTURES) -> list[dict[str, Any]]:
    """One row per architecture: ``{arch, params, width knob: value}`` at the given shape."""
    rows = []
    for arch in archs:
        try:
            cfg = model_config(arch, vocab_size=vocab_size, n_out=n_out, d_model=d_model, n_layers=n_layers)
        except ImportError:  # architecture not available in this build
            continue
        knob = _WIDTH_KNOB.get(arch, "d_mlp")
        rows.append({"arch": arch, "params": count_config_params(arch, cfg), knob: getattr(cfg, knob)})
    return rows


__all__ = ["ARCHITECTURES", "build_model", "config_class", "model_config", "count_params", "count_config_params",
           "matches_width", "param_table", "section_config"]
