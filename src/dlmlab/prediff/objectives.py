"""Adaptation objectives: the PreDiff recipe and the baselines, as (make_batch, loss_fn) for ``training.train``.

Methods (all under the same step / batch budget):

=================  ===========  ======================================  =====================
name               init         attention                               objective
=================  ===========  ======================================  =====================
prediff            pretrained   hybrid (prompt causal, target bidir.)   MDLM, 1/t bound
uniform_bidir      pretrained   bidirectional everywhere                MDLM, 1/t bound
diffugpt           pretrained   causal -> bidirectional, annealed       shifted MDLM
attn_obj           pretrained   hybrid, target block annealed           shifted MDLM
scratch            random       hybrid                                  MDLM, 1/t bound
ar_control         pretrained   causal                                  next-token (AR)
=================  ===========  ======================================  =====================

Every diffusion method uses the same wrapper (time embedding + self-conditioning),
so the comparisons isolate attention and objective.  A training row is a window
[B,T]; its first ``P_b`` tokens (``P_b`` uniform in [1, T/2]) are a clean prompt and
the rest is the target, masked with probability ``t_b``.  The loss is the MDLM
NELBO per target token, ``(1/t) * sum_masked NLL / n_target``, an upper bound on
``-log p(target | prompt) / n_target``; ``exp`` of it is the ELBO perplexity bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dlmlab.config import require
from dlmlab.data import TokenStream
from dlmlab.models.masks import build_mask
from dlmlab.objectives import ar_loss, corrupt, masked_nll
from dlmlab.objectives.schedule import elbo_weight, sample_t

Attention = Literal["hybrid", "bidirectional", "annealed", "hybrid_annealed", "causal"]
Objective = Literal["mdlm", "shifted_mdlm", "ar"]


@dataclass
class MethodConfig:
    """One adaptation method.  ``anneal_frac``: fraction of training over which an annealed mask opens."""

    name: str
    init: Literal["pretrained", "scratch"] = "pretrained"
    attention: Attention = "hybrid"
    objective: Objective = "mdlm"
    self_cond_frac: float = 0.5  # share of each batch trained with a self-conditioning first pass
    anneal_frac: float = 0.5

    def validate(self) -> None:
        require(0 <= self.self_cond_frac <= 1, f"{self.name}: self_cond_frac must be in [0, 1]")
        require(0 < self.anneal_frac <= 1, f"{self.name}: anneal_frac must be in (0, 1]")
        if self.objective == "ar":
            require(self.attention == "causal", f"{self.name}: the AR objective needs causal attention")
        else:
            require(self.attention != "causal", f"{self.name}: a diffusion objective cannot use causal attention")

    @property
    def is_diffusion(self) -> bool:
        return self.objective != "ar"

    @property
    def shift(self) -> bool:
        return self.objective == "shifted_mdlm"

    @property
    def final_attention(self) -> str:
        """The mask used after training (sampling / evaluation)."""
        return {"annealed": "bidirectional", "hybrid_annealed": "hybrid"}.get(self.attention, self.attention)


METHODS: dict[str, MethodConfig] = {
    "prediff": MethodConfig("prediff", "pretrained", "hybrid", "mdlm"),
    "uniform_bidir": MethodConfig("uniform_bidir", "pretrained", "bidirectional", "mdlm"),
    "diffugpt": MethodConfig("diffugpt", "pretrained", "annealed", "shifted_mdlm"),
    "attn_obj": MethodConfig("attn_obj", "pretrained", "hybrid_annealed", "shifted_mdlm"),
    "scratch": MethodConfig("scratch", "scratch", "hybrid", "mdlm"),
    "ar_control": MethodConfig("ar_control", "pretrained", "causal", "ar"),
}


def annealed_mask(kind: str, prompt_len: torch.Tensor, T: int, progress: float, gen: torch.Generator) -> torch.Tensor:
    """Boolean "may attend" mask [B,1,T,T] opening from causal as ``progress`` goes 0 -> 1.

    ``annealed`` (DiffuGPT): every future key is visible with probability ``progress``.
    ``hybrid_annealed``: the hybrid mask, but target->target future keys open with probability ``progress``.
    """
    B = prompt_len.shape[0]
    pos = torch.arange(T)
    causal = (pos[None, :] <= pos[:, None])[None, None]  # [1,1,T,T]
    opened = causal | (torch.rand(B, 1, T, T, generator=gen) < progress)
    if kind == "annealed":
        return opened
    hybrid = build_mask("hybrid", pos, pos, prompt_len)  # [B,1,T,T]
    P = prompt_len.reshape(-1, 1, 1, 1)
    both_target = (pos[None, None, :, None] >= P) & (pos[None, None, None, :] >= P)
    return torch.where(both_target, opened, hybrid)


def make_task(method: MethodConfig, stream_train: torch.Tensor, seq_len: int, batch: int, steps: int,
              device: str | torch.device = "cpu"):
    """(make_batch, loss_fn) for ``training.train``; all randomness is drawn in make_batch (global batch, on CPU)
    and moved to ``device`` (the model's) in loss_fn."""
    method.validate()
    T = seq_len

    def make_batch(step: int, gen: torch.Generator) -> dict:
        x = TokenStream.windows(stream_train, batch, T + (1 if not method.is_diffusion else 0), gen)
        if not method.is_diffusion:
            return {"tokens": x}
        P = torch.randint(1, T // 2 + 1, (batch,), generator=gen)
        out = {"tokens": x, "prompt_len": P, "t": sample_t(batch, gen), "noise": torch.rand(x.shape, generator=gen),
               "self_cond": torch.rand(batch, generator=gen) < method.self_cond_frac}
        if method.attention in ("annealed", "hybrid_annealed"):
            progress = min(1.0, step / max(1.0, method.anneal_frac * steps))
            out["attn"] = annealed_mask(method.attention, P, T, progress, gen)
        return out

    def loss_fn(model, b: dict):
        b = {k: v.to(device) for k, v in b.items()}
        if not method.is_diffusion:
            return ar_loss(model, b["tokens"])
        attn = b.get("attn")
        return diffusion_loss(model, b["tokens"], b["prompt_len"], b["t"], b["noise"], b["self_cond"],
                              attn_mask=attn if attn is not None else method.final_attention)

    return make_batch, loss_fn


def diffusion_loss(model, tokens: torch.Tensor, prompt_len: torch.Tensor, t: torch.Tensor, noise: torch.Tensor,
                   self_cond_rows: torch.Tensor | None = None, attn_mask=None) -> tuple[torch.Tensor, dict]:
    """MDLM NELBO per target token for windows ``tokens`` [B,T] with prompts of ``prompt_len`` [B].

    ``self_cond_rows`` [B] bool: rows that first run a no-grad pass and feed its soft
    prediction back (zeros elsewhere), as in self-conditioning training.
    Returns (loss, metrics) with ``nelbo`` (nats / target token) and ``ppl_bound = exp(nelbo)``.
    """
    B, T = tokens.shape
    inner = getattr(model, "module", model)  # DDP wraps the PreDiffLM
    pos = torch.arange(T, device=tokens.device)
    maskable = pos[None, :] >= prompt_len[:, None].to(tokens.device)
    noisy, masked = corrupt(tokens, t, inner.mask_id, maskable=maskable, noise=noise)
    kw = dict(prompt_len=prompt_len, attn_mask=attn_mask)
    sc = None
    if inner.uses_self_cond and self_cond_rows is not None and bool(self_cond_rows.any()):
        with torch.no_grad():
            first = model(noisy, t, **kw)
        sc = inner.soft_prediction(first) * self_cond_rows.to(first.device)[:, None, None].float()
    logits = model(noisy, t, self_cond=sc, **kw)
    nll = masked_nll(logits, tokens, masked, inner.mask_id)  # [B,T], zero off the masked positions
    n = maskable.sum(1).clamp(min=1)
    per_seq = elbo_weight(t).to(nll.device) * nll.sum(1) / n
    loss = per_seq.mean()
    ce = nll.sum() / masked.sum().clamp(min=1)
    return loss, {"loss": loss.item(), "nelbo": loss.item(), "ppl_bound": float(torch.exp(loss.detach())),
                  "masked_ce": ce.item()}


@torch.no_grad()
def eval_nelbo(model, windows: torch.Tensor, prompt_len: int, n_t: int = 8, batch: int = 32, seed: int = 0,
               self_cond: bool = True, attn_mask=None) -> float:
    """Monte-Carlo NELBO (nats / target token) of ``windows`` [N,T] given their first ``prompt_len`` tokens.

    ``n_t`` antithetic draws of t per window; self-conditioning (a deterministic function of
    the noisy input) keeps it a valid bound.  ``exp`` of the result is the ELBO perplexity bound.
    """
    model.eval()
    g = torch.Generator().manual_seed(seed)
    total, count = 0.0, 0
    for xb in windows.split(batch):
        B, T = xb.shape
        P = torch.full((B,), prompt_len, dtype=torch.long)
        for _ in range(n_t):
            t = sample_t(B, g)
            noise = torch.rand(xb.shape, generator=g)
            rows = torch.ones(B, dtype=torch.bool) if self_cond else None
            loss, _ = diffusion_loss(model, xb, P, t, noise, rows, attn_mask=attn_mask)
            total += loss.item() * B
            count += B
    return total / max(1, count)
