"""PreDiff-LM: a pretrained causal :class:`Transformer` wrapped as a masked-diffusion denoiser.

Additions to the backbone (all enter through ``Transformer.forward(embed_add=...)``
and only at *target* positions, so the prompt's keys/values do not depend on
the denoising step and can be computed once):

* a mask token (one extra vocabulary row, a small random vector as in the study's code, or the mean
  embedding) when the backbone has none (:func:`add_mask_token`);
* a mask-rate time embedding: sinusoidal features of ``t`` -> MLP -> [D], whose
  output layer is zero-initialised so adaptation starts from the backbone;
* self-conditioning: the previous pass's soft prediction ``p`` [B,T,V] becomes an
  expected embedding ``p @ E`` -> zero-initialised linear map -> residual [D].

With ``shift=True`` (DiffuGPT-style objective adaptation) position ``i-1``'s
output predicts token ``i``, reusing the AR head as is.  :meth:`PreDiffLM.forward`
always returns logits *aligned* to the input (``out[:, i]`` predicts token ``i``).

The generic decoder (:mod:`dlmlab.sampling`) drives it through :meth:`PreDiffLM.as_denoiser`
(:class:`PreDiffDenoiser`, the small :class:`~dlmlab.sampling.denoiser.Denoiser` interface).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from dlmlab.errors import UserError
from dlmlab.models import KVCache, Transformer
from dlmlab.models.protocol import ProtocolMethods
from dlmlab.sampling.denoiser import Denoiser


MASK_INITS: tuple[str, ...] = ("random", "mean")
RANDOM_MASK_STD = 0.02  # the study's code: a random vector of GPT-2's initialisation scale


def add_mask_token(backbone: Transformer, init: str = "random") -> tuple[Transformer, int]:
    """A copy of ``backbone`` with one extra vocabulary id (the mask, returned as ``mask_id = V``).

    The new embedding row is ``init="random"``: N(0, 0.02^2) per coordinate (the study's code; drawn
    from torch's global generator, so seed it first), or ``"mean"``: the mean of the existing rows.
    An untied unembedding gets a zero row (the mask is never predicted: its logit is set to -inf).
    """
    if init not in MASK_INITS:
        raise ValueError(f"mask token init must be one of {MASK_INITS}, got {init!r}")
    cfg = backbone.cfg
    if cfg.n_out and cfg.n_out != cfg.vocab_size:
        raise ValueError("add_mask_token needs a language-model backbone (n_out == vocab_size)")
    new_cfg = dataclasses.replace(cfg, vocab_size=cfg.vocab_size + 1, n_out=0)
    model = Transformer(new_cfg).to(backbone.tok_emb.weight.dtype)
    sd = backbone.state_dict()
    emb = sd["tok_emb.weight"]
    row = emb.mean(0, keepdim=True) if init == "mean" else torch.randn(1, emb.shape[1]).to(emb) * RANDOM_MASK_STD
    sd["tok_emb.weight"] = torch.cat([emb, row], 0)
    if not cfg.tie_embeddings and "unembed.weight" in sd:
        w = sd["unembed.weight"]
        sd["unembed.weight"] = torch.cat([w, torch.zeros_like(w[:1])], 0)
    elif cfg.tie_embeddings:
        sd.pop("unembed.weight", None)
    model.load_state_dict(sd, strict=False)
    return model, cfg.vocab_size


def sinusoidal(t: torch.Tensor, dim: int, scale: float = 1000.0) -> torch.Tensor:
    """t [B] in [0, 1] -> [B, dim] sin/cos features (transformer-style frequencies)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    ang = (scale * t.float())[:, None] * freqs[None]
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


class TimeEmbedding(nn.Module):
    """t [B] -> [B, D]: sinusoidal(t) -> Linear -> SiLU -> Linear (zero-initialised output)."""

    def __init__(self, d_model: int, dim: int = 64) -> None:
        super().__init__()
        self.dim = dim
        self.fc1 = nn.Linear(dim, d_model)
        self.fc2 = nn.Linear(d_model, d_model)
        nn.init.normal_(self.fc1.weight, std=dim**-0.5)
        nn.init.zeros_(self.fc1.bias)
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.silu(self.fc1(sinusoidal(t, self.dim).to(self.fc1.weight.dtype))))


class PreDiffLM(ProtocolMethods, nn.Module):
    """Masked-diffusion denoiser around a (pretrained) causal backbone.

    The protocol's methods (:class:`~dlmlab.models.protocol.ProtocolMethods`): its hook points are the
    backbone's (``model.backbone``), so ``has_attention()`` is False here and True on the backbone.

    ``attention``: default mask kind for forwards ("hybrid" = prompt causal, target
    bidirectional; "bidirectional"; or a boolean tensor given per call).
    """

    def __init__(self, backbone: Transformer, mask_id: int | None = None, *, attention: str = "hybrid",
                 shift: bool = False, time_embed: bool = True, self_cond: bool = True, time_dim: int = 64,
                 mask_init: str = "random") -> None:
        super().__init__()
        if mask_id is None:
            backbone, mask_id = add_mask_token(backbone, mask_init)
        if not 0 <= mask_id < backbone.cfg.vocab_size:
            raise ValueError(f"mask_id {mask_id} outside the backbone vocabulary [0, {backbone.cfg.vocab_size})")
        if attention not in ("hybrid", "bidirectional"):
            raise ValueError(f"PreDiffLM attention must be 'hybrid' or 'bidirectional', got {attention!r}")
        self.backbone = backbone
        self.mask_id = mask_id
        self.attention = attention
        self.shift = shift
        D = backbone.cfg.d_model
        self.time_embed = TimeEmbedding(D, time_dim) if time_embed else None
        self.self_cond_proj = nn.Linear(D, D, bias=False) if self_cond else None
        if self.self_cond_proj is not None:
            nn.init.zeros_(self.self_cond_proj.weight)

    @property
    def vocab_size(self) -> int:
        return self.backbone.cfg.vocab_size

    @property
    def uses_self_cond(self) -> bool:
        return self.self_cond_proj is not None

    def embed_add(self, B: int, T: int, offset: int, prompt_len, time: torch.Tensor | None,
                  self_cond: torch.Tensor | None, device) -> torch.Tensor | None:
        """[B,T,D] residual for positions ``offset..offset+T-1`` (zero at prompt positions) or None."""
        parts = []
        if self.time_embed is not None and time is not None:
            parts.append(self.time_embed(time.to(device))[:, None, :].expand(B, T, -1))
        if self.self_cond_proj is not None and self_cond is not None:
            soft = self_cond.to(self.backbone.tok_emb.weight.dtype) @ self.backbone.tok_emb.weight
            parts.append(self.self_cond_proj(soft))
        if not parts:
            return None
        add = sum(parts)
        pos = torch.arange(offset, offset + T, device=device)
        P = torch.as_tensor(0 if prompt_len is None else prompt_len, device=device).reshape(-1, 1)
        target = (pos[None, :] >= P).to(add.dtype)  # [B|1, T]
        return add * target[..., None]

    def forward(self, tokens: torch.Tensor, time: torch.Tensor | None = None, *, prompt_len=None,
                attn_mask: str | torch.Tensor | None = None, self_cond: torch.Tensor | None = None,
                kv_cache: KVCache | None = None, first_logits: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B,T] (noisy; with ``kv_cache`` only the positions after the cached prompt) -> aligned logits [B,T,V].

        time: [B] mask rate t (time embedding); self_cond: [B,T,V] previous soft prediction (aligned) or None;
        prompt_len: int or [B] (positions < prompt_len are clean prompt); first_logits: [B,V] logits of the
        position before ``tokens[:, 0]`` (needed with ``shift`` when the prompt is cached).
        """
        B, T = tokens.shape
        offset = kv_cache.length if kv_cache is not None else 0
        kind = self.attention if attn_mask is None else attn_mask
        if isinstance(kind, str) and kind == "hybrid" and prompt_len is None:
            raise ValueError("hybrid attention needs prompt_len")
        add = self.embed_add(B, T, offset, prompt_len, time, self_cond, tokens.device)
        raw = self.backbone(tokens, attn_mask=kind, prompt_len=prompt_len, embed_add=add, kv_cache=kv_cache)
        if not self.shift:
            return raw
        first = first_logits[:, None] if first_logits is not None else raw[:, :1]  # position 0 is never predicted
        return torch.cat([first.to(raw.dtype), raw[:, :-1]], dim=1)

    @torch.no_grad()
    def soft_prediction(self, logits: torch.Tensor) -> torch.Tensor:
        """Aligned logits [B,T,V] -> probabilities with the mask token excluded (self-conditioning input)."""
        logits = logits.detach().float().clone()
        logits[..., self.mask_id] = float("-inf")
        return logits.softmax(-1)

    def as_denoiser(self, mask_id: int | None = None) -> "PreDiffDenoiser":
        """This model behind the decoder's :class:`~dlmlab.sampling.denoiser.Denoiser` interface (its own mask id;
        a different ``mask_id`` is refused)."""
        if mask_id is not None and mask_id != self.mask_id:
            raise UserError(f"mask_id {mask_id} differs from the model's own mask id {self.mask_id}")
        return PreDiffDenoiser(self)


class PreDiffDenoiser(Denoiser):
    """A :class:`PreDiffLM` as a :class:`~dlmlab.sampling.denoiser.Denoiser`: time embedding from the mask rate,
    self-conditioning, hybrid (prompt-causal) or bidirectional attention, optional shift; hooks on the backbone."""

    supports_kv_cache = True

    def __init__(self, model: PreDiffLM) -> None:
        self.model = model
        self.mask_id = model.mask_id
        self.hooked = model.backbone
        self.prompt_causal = model.attention == "hybrid"
        self.shift = bool(model.shift)
        self.uses_self_cond = bool(model.uses_self_cond)
        self.alibi = model.backbone.cfg.positions == "alibi"

    def __call__(self, tokens: torch.Tensor, *, clean_len: int, t: torch.Tensor, attn=None, kv_cache=None,
                 self_cond: torch.Tensor | None = None, first: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(tokens, t, prompt_len=clean_len, attn_mask=attn, self_cond=self_cond, kv_cache=kv_cache,
                          first_logits=first)

    def encode_context(self, tokens: torch.Tensor, kv_cache) -> torch.Tensor:
        kind = "hybrid" if self.prompt_causal else "bidirectional"
        return self.model.backbone(tokens, attn_mask=kind, prompt_len=tokens.shape[1], kv_cache=kv_cache)[:, -1]

    def soft_prediction(self, logits: torch.Tensor) -> torch.Tensor:
        return self.model.soft_prediction(logits)
