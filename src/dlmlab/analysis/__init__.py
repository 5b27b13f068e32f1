"""General analyses of dlmlab models: the activation cache, probes, ablations, patching, head scores, folds.

The general names are importable from here::

    from dlmlab.analysis import probe_classification, ablate_mixers, patch_positions, fold_ln, ActivationCache

The more specialised analyses, each usable on a model of one's own, are used as modules
(``from dlmlab.analysis.induction import dlm_table``): :mod:`~dlmlab.analysis.layer_probes`,
:mod:`~dlmlab.analysis.circuits`, :mod:`~dlmlab.analysis.head_sets`, :mod:`~dlmlab.analysis.direction_ablation`,
:mod:`~dlmlab.analysis.induction`, :mod:`~dlmlab.analysis.timestep`, :mod:`~dlmlab.analysis.emergence`.
The analyses of one study's hypothesis live with that study (the reversal study's query evaluation,
storage-routing split, gradient alignment and attention-score correlation in :mod:`dlmlab.studies.reversal`).

Each analysis states what it needs of a model (the residual stream of :mod:`dlmlab.models.protocol`,
which every family has, or attention heads) and raises a one-line
:class:`~dlmlab.analysis.requires.UnsupportedModel` otherwise; docs/analysis.md is the reference.

The names are imported on first use (module ``__getattr__``), so ``import dlmlab.analysis`` costs
nothing until an analysis is touched (scikit-learn, behind the probes, alone takes most of a second).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {}


def _export(module: str, *names: str) -> None:
    for name in names:
        _EXPORTS[name] = module


# what a model must have
_export("dlmlab.analysis.requires", "UnsupportedModel", "LayerOutOfRange", "require_residual", "require_attention",
        "require_hooks")
_export("dlmlab.analysis.layers", "residual_layers")
# run_with_cache's cache (it lives beside dlmlab.interp.hooks)
_export("dlmlab.interp.activation_cache", "ActivationCache", "to_str_tokens")
# linear probes with control tasks
_export("dlmlab.analysis.probes", "ProbeResult", "probe_classification", "probe_regression", "control_labels")
# attention patterns and a head score
_export("dlmlab.analysis.heads", "attention_patterns", "previous_token_scores")
# zero / mean ablation of heads and of whole mixers
_export("dlmlab.analysis.ablation", "head_means", "ablate_heads", "mixer_means", "ablate_mixers", "ablation_effects")
# LayerNorm folding (exact, and the frozen-scale linearisation)
_export("dlmlab.analysis.fold", "fold_ln", "fold_ln_frozen_scale", "norm_scales", "fold_gap")
# activation patching
_export("dlmlab.analysis.patching", "PatchResult", "patch_positions", "logit_gap")

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dlmlab.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static tools see the real names
    from dlmlab.analysis.ablation import (ablate_heads, ablate_mixers, ablation_effects, head_means,  # noqa: F401
                                          mixer_means)
    from dlmlab.analysis.fold import fold_gap, fold_ln, fold_ln_frozen_scale, norm_scales  # noqa: F401
    from dlmlab.analysis.heads import attention_patterns, previous_token_scores  # noqa: F401
    from dlmlab.analysis.layers import residual_layers  # noqa: F401
    from dlmlab.analysis.patching import PatchResult, logit_gap, patch_positions  # noqa: F401
    from dlmlab.analysis.probes import ProbeResult, control_labels, probe_classification, probe_regression  # noqa: F401
    from dlmlab.analysis.requires import (LayerOutOfRange, UnsupportedModel, require_attention,  # noqa: F401
                                          require_hooks, require_residual)
    from dlmlab.interp.activation_cache import ActivationCache, to_str_tokens  # noqa: F401
