"""The interpretability core: hook points, the activation cache, TransformerLens's names.

* :mod:`dlmlab.interp.hooks`: :class:`HookPoint`, :class:`HookedModule` (``cache`` / ``replace`` /
  ``add`` / ``hooks``, ``run_with_cache``, ``run_with_hooks``), :class:`UnknownHookPoint`;
* :mod:`dlmlab.interp.activation_cache`: :class:`ActivationCache` (what ``run_with_cache`` returns:
  activations of one forward by hook name, with TransformerLens-style residual-stream helpers),
  :class:`LogitLens`, :func:`to_str_tokens`;
* :mod:`dlmlab.interp.tl_names`: TransformerLens hook names read as dlmlab's (and back);
* :mod:`dlmlab.interp.loss`: TransformerLens's ``return_type="loss"`` (the model's objective's loss);
* :mod:`dlmlab.interp.factored`: :class:`FactoredMatrix` (``model.OV`` / ``model.QK``).

The models import this package (every model is a :class:`HookedModule`); it imports no model.  What
the cache needs of a model (its norms' per-token scale, whether it has attention heads, its family's
name) it asks the model through the protocol's methods (:mod:`dlmlab.models.protocol`).
"""

from dlmlab.interp.activation_cache import ActivationCache, LogitLens, MissingActivation, to_str_tokens
from dlmlab.interp.factored import FactoredMatrix
from dlmlab.interp.hooks import HookedModule, HookPoint, UnknownHookPoint
from dlmlab.interp.tl_names import from_tl_name, to_tl_name

__all__ = ["ActivationCache", "FactoredMatrix", "HookPoint", "HookedModule", "LogitLens", "MissingActivation",
           "UnknownHookPoint", "from_tl_name", "to_str_tokens", "to_tl_name"]
