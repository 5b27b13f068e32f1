"""Sequence models sharing the dlmlab hook-point interface."""

from dlmlab.models.config import TransformerConfig
from dlmlab.models.kv_cache import KVCache
from dlmlab.models.transformer import Transformer

__all__ = ["Transformer", "TransformerConfig", "KVCache"]
