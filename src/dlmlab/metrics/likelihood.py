"""Likelihood metrics: exact AR perplexity on held-out windows, generative perplexity of samples.

The diffusion counterpart (the ELBO perplexity bound) is
:func:`dlmlab.prediff.eval_nelbo` (it needs the PreDiff wrapper's loss).
"""

from __future__ import annotations

import math

import torch

from dlmlab.objectives.objective import token_nll


@torch.no_grad()
def ar_nll_per_window(model, windows: torch.Tensor, prompt_len: int = 1, batch: int = 32) -> torch.Tensor:
    """Exact NLL [N] (nats / token, float64) of positions ``prompt_len..T-1`` of each window [N,T] under a causal model."""
    if windows.dim() != 2:
        raise ValueError(f"windows must be [N, T], got {tuple(windows.shape)}")
    if not 1 <= prompt_len < windows.shape[1]:
        raise ValueError(f"prompt_len must be in [1, {windows.shape[1] - 1}], got {prompt_len}")
    model.eval()
    out = []
    for xb in windows.split(batch):
        logits = model(xb[:, :-1], attn_mask="causal")[:, prompt_len - 1:]
        tgt = xb[:, prompt_len:]
        nll = token_nll(logits, tgt, torch.float64)  # [B, L]
        out.append(nll.mean(1).cpu())
    return torch.cat(out)


def ar_nll(model, windows: torch.Tensor, prompt_len: int = 1, batch: int = 32) -> float:
    """Exact NLL (nats / token) of positions ``prompt_len..T-1`` of ``windows`` [N,T] under a causal model."""
    return float(ar_nll_per_window(model, windows, prompt_len, batch).mean())


def generative_perplexity(evaluator, samples: torch.Tensor, prompt_len: int) -> float:
    """exp(NLL) of the generated part of ``samples`` [N, P+L] under a causal ``evaluator`` model."""
    return math.exp(ar_nll(evaluator, samples, prompt_len))
