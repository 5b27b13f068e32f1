"""Sequence models sharing the dlmlab model protocol (:mod:`dlmlab.models.protocol`)."""

from dlmlab.models.config import TransformerConfig
from dlmlab.models.kv_cache import KVCache
from dlmlab.models.protocol import FAMILIES, ProtocolError, check_protocol
from dlmlab.models.transformer import Transformer

__all__ = ["Transformer", "TransformerConfig", "KVCache", "FAMILIES", "ProtocolError", "check_protocol"]
