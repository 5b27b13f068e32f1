"""What an analysis needs of a model, stated at its start and refused in one clear line.

Every model follows :mod:`dlmlab.models.protocol` (residual hook points on every family); some
analyses need more, e.g. attention heads.  Each analysis calls one of these first::

    require_attention(model, "head_means", points=("z",))
    # -> UnsupportedModel: head_means needs an attention model (blocks.{i}.attn); got a Mamba

:class:`UnsupportedModel` is a :class:`~dlmlab.errors.UserError` (the CLI prints one line) and a
``TypeError`` (the model is of the wrong kind for the analysis).
"""

from __future__ import annotations

import fnmatch
import sys
from typing import Iterable

from dlmlab.errors import UserError
from dlmlab.models.protocol import family_name, has_attention, residual_point_names


class UnsupportedModel(UserError, TypeError):
    """An analysis given a model without what it needs (attention, a hook point, a module)."""


# frames of these modules sit between two analysis functions (decorators such as torch.no_grad) and are skipped
_PASS_THROUGH = ("torch", "contextlib", "functools")


def public_name(analysis: str) -> str:
    """The public analysis function the caller called: the outermost public function of an analysis module
    (``dlmlab.analysis.*``, or a study's analysis module, which says so with ``ANALYSIS_MODULE = True``) on the
    stack, above the function that states its needs (``previous_token_scores``, not the ``diagonal_scores`` it
    calls), else ``analysis``.  Refusals name it, so that the message names what was called."""
    name = analysis
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("dlmlab.analysis") or frame.f_globals.get("ANALYSIS_MODULE") is True:
            fn = frame.f_code.co_name
            if module != __name__ and not fn.startswith(("_", "<")) and callable(frame.f_globals.get(fn)):
                name = fn
        elif module.split(".")[0] not in _PASS_THROUGH:
            break  # the caller (user code, a study, the CLI)
        frame = frame.f_back
    return name


_name = public_name  # (short, for the messages below)


def a_model(model) -> str:
    """ "a Mamba", "an LSTM", "a Transformer" (for messages)."""
    name = family_name(model)
    article = "an" if name[:1].upper() in "AEIOU" or name.startswith(("LSTM", "HF")) else "a"
    return f"{article} {name}"


def require_blocks(model, analysis: str) -> int:
    """The number of blocks; raises unless ``model.blocks`` is a non-empty sequence of blocks."""
    blocks = getattr(model, "blocks", None)
    if not blocks:
        raise UnsupportedModel(f"{_name(analysis)} needs a model with blocks (model.blocks); got {a_model(model)} without any")
    return len(blocks)


class LayerOutOfRange(UserError, ValueError):
    """A layer index the model does not have."""


def require_layer(model, layer: int, analysis: str) -> None:
    """Raise :class:`LayerOutOfRange` unless ``0 <= layer < len(model.blocks)``."""
    n = require_blocks(model, analysis)
    if not 0 <= layer < n:
        raise LayerOutOfRange(f"layer {layer} out of range for a model with {n} layers")


def require_hooks(model, names: Iterable[str], analysis: str, what: str = "") -> None:
    """Raise unless every name (or fnmatch glob) in ``names`` matches a hook point of ``model``.

    ``what`` says in words what the points are ("the residual stream").
    """
    points = getattr(model, "hook_points", None)
    if not isinstance(points, dict):
        raise UnsupportedModel(f"{_name(analysis)} needs a hooked dlmlab model (model.hook_points); "
                               f"got {type(model).__name__}")
    missing = [n for n in names if not any(p == n or fnmatch.fnmatchcase(p, n) for p in points)]
    if missing:
        shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4 else "")
        why = f" ({what})" if what else ""
        raise UnsupportedModel(f"{_name(analysis)} needs the hook point{'s' if len(missing) > 1 else ''} {shown}{why}; "
                               f"got {a_model(model)} without {'them' if len(missing) > 1 else 'it'}")


def require_residual(model, analysis: str) -> None:
    """Raise unless the model has the protocol's residual hook points (every dlmlab family has)."""
    require_blocks(model, analysis)
    require_hooks(model, residual_point_names(model), analysis, "the residual stream of the model protocol")


def require_attention(model, analysis: str, points: Iterable[str] = (), weights: bool = False) -> None:
    """Raise unless every block has attention (``blocks.{i}.attn``) with hook points
    ``blocks.{i}.attn.<p>`` for ``p`` in ``points`` and, with ``weights``, per-head weights
    (``attn.head_weights()``)."""
    if not has_attention(model):
        raise UnsupportedModel(f"{_name(analysis)} needs an attention model (blocks.{{i}}.attn); got {a_model(model)}")
    require_hooks(model, [f"blocks.{i}.attn.{p}" for p in points for i in range(len(model.blocks))], analysis,
                  "attention hook points")
    if weights and not all(hasattr(b.attn, "head_weights") for b in model.blocks):
        raise UnsupportedModel(f"{_name(analysis)} needs per-head attention weights (blocks.{{i}}.attn.head_weights()); "
                               f"got {a_model(model)} without them")


def require_modules(model, names: Iterable[str], analysis: str, what: str = "") -> None:
    """Raise unless ``model`` has every attribute in ``names`` (e.g. ``tok_emb``, ``unembed``, ``ln_final``)."""
    missing = [n for n in names if getattr(model, n, None) is None]
    if missing:
        why = f" ({what})" if what else ""
        raise UnsupportedModel(f"{_name(analysis)} needs model.{', model.'.join(missing)}{why}; got {a_model(model)} without")


def require_transformer(model, analysis: str, points: Iterable[str] = (), weights: bool = False) -> None:
    """Raise unless ``model`` is a toolkit Transformer (attention, its config's positions and masks,
    ``attention_bias``, ``tok_emb``, ``unembed``, ``ln_final``): analyses that recompute parts of its forward."""
    require_attention(model, analysis, points, weights)
    if getattr(model, "family", None) != "transformer" or not hasattr(model, "attention_bias"):
        raise UnsupportedModel(f"{_name(analysis)} needs a dlmlab Transformer (it recomputes the attention scores / "
                               f"OV paths from the config); got {a_model(model)}")
    require_modules(model, ("tok_emb", "unembed", "ln_final"), analysis)
