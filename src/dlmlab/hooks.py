"""Moved to :mod:`dlmlab.interp.hooks`; this documented path re-exports its public names."""

from dlmlab.interp.hooks import HookedModule, HookPoint, UnknownHookPoint  # noqa: F401
from dlmlab.interp.activation_cache import ActivationCache  # noqa: F401
