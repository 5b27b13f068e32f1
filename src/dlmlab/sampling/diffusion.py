"""Few-step masked-diffusion sampling (the PreDiff study's sampler) for any bidirectional model.

Confidence-aware unmasking: at every step the model predicts all still-masked target
positions, a token is drawn at each (temperature / top-p, Gumbel-max in float64), and
the ``n_s`` positions whose drawn token is most probable are committed.  ``n_s``
follows a cosine schedule (:func:`~dlmlab.sampling.schedules.unmask_schedule`).
Self-conditioning feeds the previous step's soft prediction.

With hybrid attention (e.g. a :class:`~dlmlab.prediff.PreDiffLM`) the prompt never attends to the
target, so its keys/values are computed once and every step only runs the target positions
(``reuse_prompt_kv``); bidirectional models recompute the whole sequence.  The model is anything
:func:`~dlmlab.sampling.denoiser.as_denoiser` accepts (a plain model needs its ``mask_id``).  This is :func:`~dlmlab.sampling.decode.decode`
with one block, the ``confidence`` order and the cosine schedule; ``decode`` offers the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlmlab.config import Config, require
from dlmlab.models import KVCache
from dlmlab.sampling.config import DecodeConfig
from dlmlab.sampling.decode import generate
from dlmlab.sampling.denoiser import as_denoiser
from dlmlab.sampling.schedules import unmask_schedule
from dlmlab.sampling.trajectory import TraceConfig

__all__ = ["DiffusionSampleConfig", "encode_prompt", "sample_diffusion", "unmask_schedule"]


@dataclass
class DiffusionSampleConfig(Config):  # checked when built (options, finite numbers, validate())
    steps: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    self_cond: bool = True
    reuse_prompt_kv: bool = True

    def validate(self) -> None:
        require(self.steps >= 1, f"sampling steps must be >= 1, got {self.steps}")
        require(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}")
        require(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")

    def decode_config(self, attention: str) -> DecodeConfig:
        """The equivalent :class:`DecodeConfig` for a model with this attention ('hybrid' or 'bidirectional')."""
        kv_reuse = "prompt" if self.reuse_prompt_kv and attention == "hybrid" else "none"
        return DecodeConfig(steps=self.steps, temperature=self.temperature, top_p=self.top_p,
                            self_cond=self.self_cond, kv_reuse=kv_reuse)


def encode_prompt(model, prompt: torch.Tensor, mask_id: int | None = None) -> tuple[KVCache, torch.Tensor]:
    """Run the prompt once (hybrid models: causal within the prompt) -> (frozen KV cache, last position's raw logits [B,V])."""
    cache = KVCache()
    raw = as_denoiser(model, mask_id).encode_context(prompt, cache)
    return cache.freeze(), raw


@torch.no_grad()
def sample_diffusion(model, prompt: torch.Tensor, gen_len: int, cfg: DiffusionSampleConfig | None = None,
                     generator: torch.Generator | None = None, return_logits: bool = False, *,
                     mask_id: int | None = None, shift_logits: bool = False):
    """prompt [B,P] -> [B, P+gen_len] (and, with ``return_logits``, the per-step target logits [B,gen_len,V]).

    ``model``: a :class:`~dlmlab.prediff.PreDiffLM` (its own mask id), any bidirectional model with its
    ``mask_id`` (``shift_logits``: Dream's convention) or a :class:`~dlmlab.sampling.denoiser.Denoiser`.
    Prompt keys/values are reused across steps when the model's attention is hybrid and ``cfg.reuse_prompt_kv``.
    """
    cfg = cfg or DiffusionSampleConfig()
    cfg.validate()
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be [batch, >=1 tokens], got shape {tuple(prompt.shape)}")
    if gen_len < 1:
        raise ValueError(f"gen_len must be >= 1, got {gen_len}")
    den = as_denoiser(model, mask_id, shift_logits)
    attention = "hybrid" if den.prompt_causal and den.supports_kv_cache else "bidirectional"
    res = generate(den, prompt, gen_len, cfg.decode_config(attention), generator,
                   trace=TraceConfig(logits=True) if return_logits else None, record=return_logits)
    if return_logits:
        return res.tokens, [r.logits for r in res.trajectory]
    return res.tokens
