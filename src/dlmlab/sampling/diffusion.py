"""Few-step masked-diffusion sampling for :class:`~dlmlab.prediff.PreDiffLM`.

Confidence-aware unmasking: at every step the model predicts all still-masked target
positions, a token is drawn at each (temperature / top-p, Gumbel-max in float64), and
the ``n_s`` positions whose drawn token is most probable are committed.  ``n_s``
follows a cosine schedule: the cumulative share unmasked after step ``s`` of ``S`` is
``1 - cos(pi/2 * s/S)``, so few tokens are committed first and more later (each step
commits at least one).  Self-conditioning feeds the previous step's soft prediction.

With hybrid attention the prompt never attends to the target, so its keys/values are
computed once into a frozen :class:`~dlmlab.models.KVCache` and every step only runs the
target positions (``reuse_prompt_kv``); bidirectional models recompute the whole sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dlmlab.config import require
from dlmlab.models import KVCache
from dlmlab.sampling.gumbel import sample_from_logits


@dataclass
class DiffusionSampleConfig:
    steps: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    self_cond: bool = True
    reuse_prompt_kv: bool = True

    def validate(self) -> None:
        require(self.steps >= 1, f"sampling steps must be >= 1, got {self.steps}")
        require(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}")
        require(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")


def unmask_schedule(gen_len: int, steps: int) -> list[int]:
    """Tokens committed per step (cosine: few first, accelerating); ``min(steps, gen_len)`` entries summing to gen_len."""
    if gen_len < 1:
        raise ValueError(f"gen_len must be >= 1, got {gen_len}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    S = min(steps, gen_len)
    counts, done = [], 0
    for s in range(1, S + 1):
        target = round(gen_len * (1 - math.cos(math.pi / 2 * s / S)))
        target = max(done + 1, min(target, gen_len - (S - s)))  # >= 1 now, >= 1 left for each later step
        counts.append(target - done)
        done = target
    return counts


def encode_prompt(model, prompt: torch.Tensor) -> tuple[KVCache, torch.Tensor]:
    """Run the prompt once (hybrid: causal within the prompt) -> (frozen KV cache, last position's raw logits [B,V])."""
    cache = KVCache()
    P = prompt.shape[1]
    raw = model.backbone(prompt, attn_mask="hybrid", prompt_len=P, kv_cache=cache)
    return cache.freeze(), raw[:, -1]


@torch.no_grad()
def sample_diffusion(model, prompt: torch.Tensor, gen_len: int, cfg: DiffusionSampleConfig | None = None,
                     generator: torch.Generator | None = None, return_logits: bool = False):
    """prompt [B,P] -> [B, P+gen_len] (and, with ``return_logits``, the per-step target logits [B,gen_len,V]).

    ``model`` is a :class:`~dlmlab.prediff.PreDiffLM`.  Prompt keys/values are reused across
    steps when the model's attention is hybrid and ``cfg.reuse_prompt_kv``.
    """
    cfg = cfg or DiffusionSampleConfig()
    cfg.validate()
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be [batch, >=1 tokens], got shape {tuple(prompt.shape)}")
    model.eval()
    B, P = prompt.shape
    mask_id = model.mask_id
    if bool((prompt == mask_id).any()):
        raise ValueError(f"prompt contains the mask token id {mask_id}")
    target = torch.full((B, gen_len), mask_id, dtype=prompt.dtype, device=prompt.device)
    cached = cfg.reuse_prompt_kv and model.attention == "hybrid"
    cache, first = encode_prompt(model, prompt) if cached else (None, None)
    sc = None
    trace = []
    for n_commit in unmask_schedule(gen_len, cfg.steps):
        still = target == mask_id  # [B,L]
        t = still.float().mean(1)  # current mask rate [B]
        if cached:
            logits = model(target, t, prompt_len=P, kv_cache=cache, self_cond=sc, first_logits=first)
        else:
            full_sc = None if sc is None else torch.cat([sc.new_zeros(B, P, sc.shape[-1]), sc], 1)
            logits = model(torch.cat([prompt, target], 1), t, prompt_len=P, self_cond=full_sc)[:, P:]
        if return_logits:
            trace.append(logits.detach().clone())
        where = still.nonzero(as_tuple=True)  # draw tokens only where still masked
        tok_m, conf_m = sample_from_logits(logits[where], cfg.temperature, cfg.top_p, generator, banned=mask_id)
        conf = torch.full((B, gen_len), -1.0, dtype=conf_m.dtype, device=target.device)
        conf[where] = conf_m
        tok = torch.zeros_like(target)
        tok[where] = tok_m.to(target.dtype)
        chosen = conf.topk(n_commit, dim=1).indices  # [B, n_commit], all still masked
        target = target.scatter(1, chosen, tok.gather(1, chosen))
        if cfg.self_cond and model.uses_self_cond and n_commit < int(still.sum(1).min()):
            sc = model.soft_prediction(logits)
    out = torch.cat([prompt, target], 1)
    return (out, trace) if return_logits else out
