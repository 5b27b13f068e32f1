"""Moved to :mod:`dlmlab.interp.activation_cache`; this documented path re-exports its public names."""

from dlmlab.interp.activation_cache import ActivationCache, LogitLens, MissingActivation, to_str_tokens  # noqa: F401
