"""``dlmlab.analysis`` exports the general analyses by name, lazily: every name in ``__all__`` resolves to the
object of its module, study-specific analyses stay in their modules, and importing the package alone loads
neither torch nor scikit-learn."""

from __future__ import annotations

import importlib
import types

import pytest

import dlmlab.analysis as analysis


def test_every_export_resolves_to_its_definition():
    assert analysis.__all__ == sorted(set(analysis.__all__))
    for name in analysis.__all__:
        value = getattr(analysis, name)
        assert not isinstance(value, types.ModuleType), name
        module = importlib.import_module(analysis._EXPORTS[name])
        assert getattr(module, name) is value, name
    assert set(analysis.__all__) <= set(dir(analysis))


def test_star_import_and_unknown_name():
    ns: dict = {}
    exec("from dlmlab.analysis import *", ns)  # noqa: S102
    assert {"fold_ln", "ActivationCache", "probe_classification", "ablate_mixers", "patch_positions"} <= set(ns)
    with pytest.raises(AttributeError, match="no_such_analysis"):
        analysis.no_such_analysis  # noqa: B018


def test_only_general_names_are_exported():
    """About 25 general names; a study's analyses are used as modules (``from dlmlab.analysis.induction import``)."""
    assert 20 <= len(analysis.__all__) <= 30
    modules = {m.rsplit(".", 1)[-1] for m in analysis._EXPORTS.values()}
    assert modules == {"requires", "layers", "activation_cache", "probes", "heads", "ablation", "fold", "patching"}
    for name in ("dlm_table", "probe_layers", "composition_scores", "storage_matrix", "mask_rate_probe",
                 "checkpoint_curve", "score_correlation", "storage_gradient_cosine"):
        assert name not in analysis.__all__, name
        with pytest.raises(AttributeError):
            getattr(analysis, name)


def test_the_cache_lives_below_the_analyses():
    """``dlmlab.interp.hooks`` imports the cache at top level; the cache module imports nothing of dlmlab.analysis;
    the old documented paths ``dlmlab.hooks`` / ``dlmlab.cache`` re-export the same objects."""
    import dlmlab.cache
    import dlmlab.hooks
    import dlmlab.interp.activation_cache
    import dlmlab.interp.hooks

    cache_class = dlmlab.interp.activation_cache.ActivationCache
    assert dlmlab.interp.hooks.ActivationCache is cache_class is analysis.ActivationCache
    assert dlmlab.hooks.HookedModule is dlmlab.interp.hooks.HookedModule
    assert dlmlab.cache.to_str_tokens is dlmlab.interp.activation_cache.to_str_tokens
    # that nothing below imports the analyses is tests/test_layers.py's static check of the import graph


def test_submodules_stay_modules():
    """A submodule imported from the package is the module, not a lazily exported name."""
    import dlmlab.analysis.induction as ind
    from dlmlab.analysis import fold, induction

    assert induction is ind and isinstance(fold, types.ModuleType) and callable(ind.dlm_table)


def test_study_specific_analyses_live_with_their_study():
    """The reversal study's analyses moved to dlmlab.studies.reversal; no shim is left in dlmlab.analysis."""
    for name in ("queries", "storage_routing", "gradient_alignment", "attention_correlation"):
        assert callable(getattr(importlib.import_module(f"dlmlab.studies.reversal.{name}"), {
            "queries": "query_eval", "storage_routing": "storage_routing", "gradient_alignment": "storage_modules",
            "attention_correlation": "score_correlation"}[name]))
    for old in ("reversal", "storage_routing", "gradient_alignment", "attention_correlation"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"dlmlab.analysis.{old}")
