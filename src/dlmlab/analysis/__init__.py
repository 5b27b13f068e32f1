"""Analyses usable on dlmlab models: probes, ablations, patching, circuits, folds, caches, diagnostics.

Everything a user reaches for is importable from here::

    from dlmlab.analysis import probe_layers, ablate_mixers, patch_positions, fold_ln, ActivationCache

Each analysis states what it needs of a model (the residual stream of :mod:`dlmlab.models.protocol`,
which every family has, or attention heads) and raises a one-line
:class:`~dlmlab.analysis.requires.UnsupportedModel` otherwise; docs/analysis.md is the reference.

The names are imported on first use (module ``__getattr__``), so ``import dlmlab.analysis`` costs
nothing until an analysis is touched (scikit-learn, behind the probes, alone takes most of a second).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> submodule of dlmlab.analysis that defines it
_EXPORTS: dict[str, str] = {}


def _export(module: str, *names: str) -> None:
    for name in names:
        _EXPORTS[name] = module


# what a model must have
_export("requires", "UnsupportedModel", "LayerOutOfRange", "require_residual", "require_attention",
        "require_transformer", "require_hooks", "require_layer", "require_modules")
_export("layers", "residual_layers")
# run_with_cache's cache and its helpers
_export("cache", "ActivationCache", "LogitLens", "MissingActivation", "to_str_tokens")
# linear probes, per layer, with control tasks
_export("probes", "ProbeResult", "probe_classification", "probe_regression", "control_labels")
_export("layer_probes", "LayerProbe", "collect_states", "probe_layers", "best_layer", "token_control_labels",
        "sample_positions")
# attention-pattern head scores
_export("heads", "attention_patterns", "attention_to", "offset_scores", "diagonal_scores",
        "previous_token_scores", "next_token_scores")
# zero / mean ablation of heads and of whole mixers; head sets against random sets
_export("ablation", "ABLATIONS", "head_means", "ablate_heads", "ablation_effects", "mixer_means", "ablate_mixers")
_export("head_sets", "Head", "SetAblation", "heads_above", "layer_pool", "random_sets", "set_ablation_test")
# QK / OV circuits and composition scores
_export("circuits", "Factored", "COMPOSITIONS", "qk_circuit", "ov_circuit", "all_circuits",
        "composition_scores", "copying_scores")
# LayerNorm folding (exact, and the frozen-scale linearisation) and norm scales
_export("fold", "fold_ln", "fold_ln_frozen_scale", "freeze_norm_scales", "norm_scales", "norm_scale",
        "scale_like_norm", "fold_gap", "FrozenScaleNorm", "MissingScale")
# activation patching and direction ablation
_export("patching", "PatchResult", "patch_positions", "logit_gap")
_export("direction_ablation", "orthonormal", "project_out", "probe_basis", "pca_basis", "random_basis",
        "tagging_accuracy", "per_sequence_accuracy", "ablation_drops")
# relation queries: storage vs routing, attention-score correlation, gradient alignment
_export("reversal", "query_log_probs", "query_eval", "query_loss")
# (the function storage_routing shares its module's name, so it is imported from
# dlmlab.analysis.storage_routing: the package attribute of that name is the module, as Python sets it)
_export("storage_routing", "StorageRouting", "storage_matrix", "storage_margin", "attention_scores",
        "final_norm_scale")
_export("attention_correlation", "ScoreCorrelation", "DistanceProfile", "score_correlation", "distance_profile",
        "evidence_scores", "pearson")
_export("gradient_alignment", "storage_column_gradient", "storage_gradient_cosine", "parameter_gradient_cosine",
        "per_query_gradients", "per_query_gradient_cosine", "storage_modules")
# masked diffusion: the implicit timestep (mask rate) in the residual stream
_export("timestep", "ProbeReport", "mask_rate_probe", "prediction_entropy", "patch_mask_rate", "nested_masks",
        "mean_shift_patch")
# induction in both directions
_export("induction", "InductionRows", "build_rows", "context_gains", "additivity", "masked_accuracy",
        "dlm_accuracy", "ar_accuracy", "dlm_table", "ar_table", "local_window", "dlm_induction_scores",
        "ar_induction_scores")
# a metric over a run's checkpoints
_export("emergence", "checkpoint_curve", "checkpoint_curves", "jump_step")

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dlmlab.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dlmlab.analysis.{module}"), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static tools see the real names
    from dlmlab.analysis.ablation import (ABLATIONS, ablate_heads, ablate_mixers, ablation_effects,  # noqa: F401
                                          head_means, mixer_means)
    from dlmlab.analysis.cache import ActivationCache, LogitLens, MissingActivation, to_str_tokens  # noqa: F401
    from dlmlab.analysis.fold import (FrozenScaleNorm, MissingScale, fold_gap, fold_ln,  # noqa: F401
                                      fold_ln_frozen_scale, freeze_norm_scales, norm_scale, norm_scales,
                                      scale_like_norm)
    from dlmlab.analysis.layer_probes import LayerProbe, best_layer, collect_states, probe_layers  # noqa: F401
    from dlmlab.analysis.layers import residual_layers  # noqa: F401
    from dlmlab.analysis.patching import PatchResult, logit_gap, patch_positions  # noqa: F401
    from dlmlab.analysis.probes import ProbeResult, control_labels, probe_classification, probe_regression  # noqa: F401
    from dlmlab.analysis.requires import LayerOutOfRange, UnsupportedModel  # noqa: F401
