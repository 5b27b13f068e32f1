"""Autoregressive next-token objective."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def ar_loss(model, tokens: torch.Tensor, **forward_kwargs) -> tuple[torch.Tensor, dict]:
    """tokens [B,T] -> mean next-token NLL (nats/token) and metrics {loss, ppl}."""
    logits = model(tokens[:, :-1], **forward_kwargs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    return loss, {"loss": loss.item(), "ppl": float(torch.exp(loss.detach()))}
