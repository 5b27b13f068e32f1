"""Transformer language model with uniform hook points.

Follows :mod:`dlmlab.models.protocol` (family "transformer").  Hook points: ``embed``
[B,T,D] (token embedding), ``pos_embed`` [B,T,D] (learned positions only),
``blocks.{i}.resid_pre|attn_out|mixer_out|resid_mid|mlp_out|resid_post`` [B,T,D]
(``mixer_out`` = ``attn_out``, the attention sublayer's output; the MLP's is ``mlp_out``, see
:mod:`dlmlab.models.block`), ``blocks.{i}.attn.{q,k,v,z}`` [B,T,H,d_head],
``blocks.{i}.attn.pattern`` [B,H,Tq,Tk], ``blocks.{i}.attn.head_out`` [B,T,H,D], ``final``
[B,T,D] (after the final norm) and ``logits`` [B,T,V]; inside each norm (opt-in, TransformerLens's
``hook_scale`` / ``hook_normalized``; :mod:`dlmlab.models.norm`) ``ln_final.scale`` [B,T,1] and
``ln_final.normalized`` [B,T,D] (before the weight and bias), and the same under ``blocks.{i}.ln1`` / ``ln2``.
"""

from __future__ import annotations

import torch
from torch import nn

from dlmlab.interp.hooks import HookedModule, HookPoint
from dlmlab.models.block import Block
from dlmlab.models.checks import ModelInputError, check_tokens
from dlmlab.models.config import TransformerConfig
from dlmlab.models.kv_cache import KVCache
from dlmlab.models.masks import build_mask
from dlmlab.models.norm import make_norm
from dlmlab.models.positions import alibi_bias, alibi_slopes, rope_cos_sin
from dlmlab.models.protocol import ProtocolMethods
from dlmlab.models.weight_views import AttentionViews


class Transformer(ProtocolMethods, AttentionViews, HookedModule):
    """TransformerLens's weight views (``W_E``, ``W_Q`` [L, H, D, d_head] ...): :mod:`dlmlab.models.weight_views`."""

    residual_stream = True  # resid_post = resid_pre + mixer_out (+ mlp_out)
    supports_kv_cache = True  # forward(kv_cache=KVCache()) decodes incrementally

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        cfg.validate()
        if cfg.vocab_size <= 0:
            raise ValueError("TransformerConfig.vocab_size must be set (> 0) before building a model")
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.positions == "learned" else None
        self.blocks = nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layers)])
        self.ln_final = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.bias, hooked=True)
        self.unembed = nn.Linear(cfg.d_model, cfg.out_size, bias=False)
        if cfg.tie_embeddings and cfg.out_size == cfg.vocab_size:
            self.unembed.weight = self.tok_emb.weight
        self.embed, self.pos_embed, self.final, self.logits = HookPoint(), HookPoint(), HookPoint(), HookPoint()
        self.apply(self._init)
        self.setup_hooks()

    def _init(self, m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=self.cfg.init_std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=self.cfg.init_std)

    @property
    def family(self) -> str:
        return self.cfg.family

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ------------------------------------------------------------------------------------
    def check_tokens(self, tokens: torch.Tensor, offset: int = 0) -> None:
        """Raise :class:`~dlmlab.models.checks.ModelInputError` (a ValueError) naming the problem if
        ``tokens`` cannot be fed to this model."""
        check_tokens(tokens, self.cfg.vocab_size)
        T = tokens.shape[1] + offset
        if self.pos_emb is not None and T > self.cfg.max_seq_len:
            raise ModelInputError(
                f"sequence length {T} exceeds max_seq_len {self.cfg.max_seq_len} of learned positions"
            )

    def attention_bias(
        self, kind: str, q_pos: torch.Tensor, k_pos: torch.Tensor, prompt_len=None, dtype=torch.float32
    ) -> tuple[torch.Tensor | None, bool]:
        """Additive bias [B|1, H|1, Tq, Tk] (or None) and whether SDPA may use is_causal."""
        cached = k_pos.shape[0] != q_pos.shape[0]
        alibi = self.cfg.positions == "alibi"
        custom = isinstance(kind, torch.Tensor)  # a boolean "may attend" mask [B|1, 1|H, Tq, Tk]
        if not custom and kind == "causal" and not alibi and not cached:
            return None, True
        allowed = kind.to(q_pos.device) if custom else build_mask(kind, q_pos, k_pos, prompt_len)
        bias = None
        if allowed is not None:
            bias = torch.zeros(allowed.shape, dtype=dtype, device=q_pos.device).masked_fill(~allowed, float("-inf"))
        if alibi:
            ab = alibi_bias(alibi_slopes(self.cfg.n_heads, dtype, q_pos.device), q_pos, k_pos).to(dtype)[None]
            bias = ab if bias is None else bias + ab
        return bias, False

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        attn_mask: str | torch.Tensor | None = None,
        prompt_len: torch.Tensor | int | None = None,
        embed_add: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
    ) -> torch.Tensor:
        """tokens [B,T] -> logits [B,T,V] (V = cfg.n_out when set).

        attn_mask: override ``cfg.attn_mask`` ("causal" | "bidirectional" | "hybrid"), or a boolean
            "may attend" tensor [B|1, 1, T, T_cached+T] (e.g. an annealed mask).
        prompt_len: int or [B] tensor, needed by "hybrid" (absolute positions < P are prompt).
        embed_add: [B,T,D] added to the input embedding (time / self-conditioning inputs).
        kv_cache: attend to cached keys/values first; new ones are appended unless frozen.
        """
        offset = kv_cache.length if kv_cache is not None else 0
        self.check_tokens(tokens, offset)
        B, T = tokens.shape
        kind = self.cfg.attn_mask if attn_mask is None else attn_mask
        device = tokens.device
        q_pos = torch.arange(offset, offset + T, device=device)
        k_pos = torch.arange(0, offset + T, device=device)
        x = self.embed(self.tok_emb(tokens))
        if self.pos_emb is not None:
            x = x + self.pos_embed(self.pos_emb(q_pos)[None].expand(B, -1, -1))
        if embed_add is not None:
            x = x + embed_add
        rope = None
        if self.cfg.positions == "rope":
            rope = rope_cos_sin(q_pos, self.cfg.d_head, self.cfg.rope_theta, x.dtype)
        bias, is_causal = self.attention_bias(kind, q_pos, k_pos, prompt_len, x.dtype)
        for block in self.blocks:
            x = block(x, bias, is_causal, rope, kv_cache)
        x = self.final(self.ln_final(x))
        return self.logits(self.unembed(x))
