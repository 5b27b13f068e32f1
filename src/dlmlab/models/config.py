"""Transformer configuration (validated at load)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dlmlab.config import Config, Derived, is_auto, require

AttnMask = Literal["causal", "bidirectional", "hybrid"]
Positions = Literal["learned", "rope", "alibi", "none"]
Norm = Literal["layernorm", "rmsnorm", "none"]
MLPKind = Literal["gelu", "gelu_new", "relu", "swiglu"]


@dataclass
class TransformerConfig(Config):
    """Shape and variant of a :class:`~dlmlab.models.transformer.Transformer`.

    ``d_mlp = 0`` gives an attention-only model.  ``bias`` puts biases on every linear
    map and norm; ``qkv_bias`` adds them on the query/key/value maps alone (Qwen2 style).  ``attn_mask`` is the default
    mask; a forward call may override it.  ``hybrid`` needs ``prompt_len``.
    Checked when built (options, finite numbers, ranges); ``d_head`` left at 0 is
    derived (and re-derived by ``dataclasses.replace``).
    """

    vocab_size: int = 0  # 0: taken from the data / tokenizer
    n_out: int = 0  # output classes; 0 -> vocab_size (a language model)
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_head: int = 0  # 0 -> d_model // n_heads
    d_mlp: int = 0  # 0 -> attention-only
    mlp: MLPKind = "gelu_new"
    norm: Norm = "layernorm"
    norm_eps: float = 1e-5
    attn_mask: AttnMask = "causal"
    positions: Positions = "learned"
    rope_theta: float = 10000.0
    max_seq_len: int = 256
    bias: bool = True  # biases on every linear map and norm
    qkv_bias: bool = False  # biases on W_q/W_k/W_v even when bias is False (Qwen2 / Dream)
    tie_embeddings: bool = True
    init_std: float = 0.02

    def derive(self) -> None:
        if is_auto(self.d_head):
            ok = self.n_heads > 0 and self.d_model % self.n_heads == 0
            self.d_head = Derived(self.d_model // self.n_heads) if ok else 0

    def validate(self) -> None:
        require(self.vocab_size >= 0, f"model.vocab_size must be >= 0, got {self.vocab_size}")
        require(self.n_out >= 0, f"model.n_out must be >= 0, got {self.n_out}")
        require(self.d_model > 0, f"model.d_model must be > 0, got {self.d_model}")
        require(self.n_layers >= 0, f"model.n_layers must be >= 0, got {self.n_layers}")
        require(self.n_heads > 0, f"model.n_heads must be > 0, got {self.n_heads}")
        require(self.d_head >= 0, f"model.d_head must be > 0 (or 0 for d_model // n_heads), got {self.d_head}")
        require(
            self.d_head > 0,
            f"model.d_model ({self.d_model}) is not divisible by model.n_heads ({self.n_heads}); set model.d_head",
        )
        require(self.d_mlp >= 0, f"model.d_mlp must be >= 0, got {self.d_mlp}")
        require(self.max_seq_len > 0, f"model.max_seq_len must be > 0, got {self.max_seq_len}")
        require(self.norm_eps > 0, f"model.norm_eps must be > 0, got {self.norm_eps}")
        require(self.rope_theta > 0, f"model.rope_theta must be > 0, got {self.rope_theta}")
        require(self.init_std >= 0, f"model.init_std must be >= 0, got {self.init_std}")
        if self.positions == "rope":
            require(self.d_head % 2 == 0, f"rope needs an even model.d_head, got {self.d_head}")

    @property
    def family(self) -> str:
        """The model family (see :mod:`dlmlab.models.protocol`)."""
        return "transformer"

    @property
    def out_size(self) -> int:
        return self.n_out or self.vocab_size

    @property
    def attn_only(self) -> bool:
        return self.d_mlp == 0
