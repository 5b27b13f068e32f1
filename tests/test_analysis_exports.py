"""``dlmlab.analysis`` exports the analyses by name, lazily: every name in ``__all__`` resolves to the
object of its submodule, and importing the package alone loads neither torch nor scikit-learn."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import dlmlab.analysis as analysis


def test_every_export_resolves_to_its_definition():
    assert analysis.__all__ == sorted(set(analysis.__all__))
    for name in analysis.__all__:
        value = getattr(analysis, name)
        assert not isinstance(value, types.ModuleType), name
        module = importlib.import_module(f"dlmlab.analysis.{analysis._EXPORTS[name]}")
        assert getattr(module, name) is value, name
    assert set(analysis.__all__) <= set(dir(analysis))


def test_star_import_and_unknown_name():
    ns: dict = {}
    exec("from dlmlab.analysis import *", ns)  # noqa: S102
    assert {"fold_ln", "ActivationCache", "probe_layers", "ablate_mixers", "patch_positions"} <= set(ns)
    try:
        analysis.no_such_analysis  # noqa: B018
    except AttributeError as e:
        assert "no_such_analysis" in str(e)
    else:  # pragma: no cover
        raise AssertionError("an unknown name must raise AttributeError")


def test_submodules_stay_modules():
    """A submodule named like one of its functions (storage_routing) is still the module."""
    import dlmlab.analysis.storage_routing as sr
    from dlmlab.analysis import cache, storage_routing

    assert isinstance(sr, types.ModuleType) and callable(sr.storage_routing)
    assert storage_routing is sr and isinstance(cache, types.ModuleType)


def test_import_is_cheap():
    code = "import sys, dlmlab.analysis; print('torch' in sys.modules, 'sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
