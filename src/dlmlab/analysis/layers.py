"""The residual stream's layers: one list of hook names for every analysis that walks the depth.

:func:`residual_layers` -> ``[start, "blocks.0.resid_post", ..., "blocks.{L-1}.resid_post"]``: the
stream entering block 0, then the output of every block (layer 0 = before any block).  ``start``
chooses the first entry:

* ``"resid_pre"`` (default): ``blocks.0.resid_pre``, what block 0 reads (the Transformer's token
  embedding plus positions plus ``embed_add``; on Mamba / LSTM / GRU the same tensor as ``embed``);
  models without it (e.g. Hugging Face wrappers exposing only ``embed``) fall back to ``embed``;
* ``"embed"``: the token embedding ``embed`` (before positions are added), when present.

Works on any model of the protocol (:mod:`dlmlab.models.protocol`) and on wrappers that expose
``blocks.{i}.resid_post``; a model without those raises a one-line
:class:`~dlmlab.analysis.requires.UnsupportedModel`.
"""

from __future__ import annotations

import re
from typing import Literal

from dlmlab.analysis.requires import UnsupportedModel, a_model

_RESID_POST = re.compile(r"^blocks\.(\d+)\.resid_post$")
Start = Literal["resid_pre", "embed"]


def residual_layers(model, start: Start = "resid_pre") -> list[str]:
    """Hook names of the residual stream before block 0 and after each block, in depth order."""
    if start not in ("resid_pre", "embed"):
        raise ValueError(f"start must be 'resid_pre' or 'embed', got {start!r}")
    names = getattr(model, "hook_points", {})
    blocks = sorted((int(m.group(1)), n) for n in names if (m := _RESID_POST.match(n)))
    if not blocks:
        raise UnsupportedModel(f"residual layers need 'blocks.{{i}}.resid_post' hook points; "
                               f"got {a_model(model)} without them")
    first = [n for n in (("blocks.0.resid_pre", "embed") if start == "resid_pre" else ("embed",)) if n in names]
    return first[:1] + [n for _, n in blocks]
