"""Autoregressive next-token objective (the function form of :class:`~dlmlab.objectives.objective.ARObjective`)."""

from __future__ import annotations

import torch


def ar_loss(model, tokens: torch.Tensor, **forward_kwargs) -> tuple[torch.Tensor, dict]:
    """tokens [B,T] -> mean next-token NLL (nats/token) and metrics {loss, ppl}."""
    from dlmlab.objectives.objective import ARObjective

    return ARObjective().loss(model, {"tokens": tokens}, **forward_kwargs)
