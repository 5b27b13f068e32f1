"""Per-layer linear probes of a per-position label, with a control-task baseline.

Works on any toolkit model with ``embed`` and ``blocks.{i}.resid_post`` hook points
(Transformer, Mamba, Mamba-2, LSTM, GRU, or a wrapped Hugging Face model).

* :func:`residual_layers` -> ``["embed", "blocks.0.resid_post", ...]`` (layer 0 = embedding);
* :func:`collect_states` -> {name: [B, T, D]} activations of one or more batches;
* :func:`probe_layers` -> one :class:`LayerProbe` per layer: held-out accuracy of a
  logistic probe (:func:`dlmlab.analysis.probes.probe_classification`, split by sequence),
  the same probe on control labels, and selectivity = accuracy - control accuracy;
* :func:`best_layer` -> earliest layer whose accuracy is within ``tol`` of the best.

Control tasks: ``"shuffle"`` (labels shuffled across positions,
:func:`~dlmlab.analysis.probes.control_labels`: what a probe gets from the label marginal)
or ``"token"`` (Hewitt & Liang: each input token id gets a fixed random label drawn from
the label marginal: what a probe gets from memorising token identity).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import torch

from dlmlab.analysis import layers
from dlmlab.analysis.probes import ProbeResult, control_labels, probe_classification

_RESID = re.compile(r"^blocks\.(\d+)\.resid_post$")


def residual_layers(model) -> list[str]:
    """Hook names of the residual stream after each layer, embedding first (:func:`dlmlab.analysis.layers.residual_layers`
    with ``start="embed"``)."""
    return layers.residual_layers(model, start="embed")


@torch.no_grad()
def collect_states(model, tokens: torch.Tensor, names: Sequence[str], batch_size: int = 256) -> dict[str, torch.Tensor]:
    """tokens [B, T] -> {name: activation [B, T, D]} (float32, CPU)."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be [batch, seq], got shape {tuple(tokens.shape)}")
    was_training = model.training
    model.eval()
    parts: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    try:
        for i in range(0, tokens.shape[0], batch_size):
            with model.cache(list(names)) as c:
                model(tokens[i:i + batch_size])
            for n in names:
                if n not in c:
                    raise KeyError(f"hook point {n!r} was not reached in the forward pass")
                parts[n].append(c[n].float().cpu())
    finally:
        model.train(was_training)
    return {n: torch.cat(v) for n, v in parts.items()}


@dataclass
class LayerProbe:
    name: str
    layer: int  # 0 = embedding, i + 1 = after block i
    accuracy: float  # held-out probe accuracy
    control_accuracy: float  # same probe on control labels
    train_accuracy: float
    probe: ProbeResult

    @property
    def selectivity(self) -> float:
        return self.accuracy - self.control_accuracy

    def to_dict(self) -> dict:
        return {"name": self.name, "layer": self.layer, "accuracy": self.accuracy,
                "control_accuracy": self.control_accuracy, "selectivity": self.selectivity,
                "train_accuracy": self.train_accuracy, "converged": self.probe.converged}


def token_control_labels(tokens: np.ndarray, labels: np.ndarray, seed: int = 0) -> np.ndarray:
    """Hewitt & Liang control: a fixed random label per token id, drawn from the label marginal."""
    rng = np.random.default_rng(seed)
    vocab = int(tokens.max()) + 1 if tokens.size else 0
    if not labels.size:
        return np.zeros_like(tokens)
    classes = np.unique(labels)
    table = rng.choice(labels, size=vocab, replace=True)
    present = np.unique(tokens)
    if len(classes) > 1 and len(present) > 1 and len(np.unique(table[present])) < 2:
        # a probe needs two classes: give the first two observed tokens two different labels
        table[present[:2]] = rng.choice(classes, size=2, replace=False)
    return table[tokens]


def sample_positions(B: int, T: int, max_samples: int, seed: int = 0, min_pos: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``max_samples`` distinct (row, position) pairs, positions >= min_pos -> (rows [N], pos [N])."""
    rows, pos = np.meshgrid(np.arange(B), np.arange(min_pos, T), indexing="ij")
    rows, pos = rows.ravel(), pos.ravel()
    if max_samples and len(rows) > max_samples:
        keep = np.sort(np.random.default_rng(seed).choice(len(rows), max_samples, replace=False))
        rows, pos = rows[keep], pos[keep]
    return rows, pos


def probe_layers(
    model,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    names: Sequence[str] | None = None,
    max_samples: int = 4000,
    control: Literal["shuffle", "token"] = "shuffle",
    seed: int = 0,
    C: float = 1.0,
    max_iter: int = 300,
    states: dict[str, torch.Tensor] | None = None,
) -> list[LayerProbe]:
    """Fit one probe per layer on ``labels`` [B, T] from activations at ``names`` (default: residual_layers).

    Positions are subsampled (``max_samples``) and split train/test by sequence.
    ``states`` may pass precomputed :func:`collect_states` output.
    """
    if labels.shape != tokens.shape:
        raise ValueError(f"labels {tuple(labels.shape)} must match tokens {tuple(tokens.shape)}")
    if control not in ("shuffle", "token"):
        raise ValueError(f"control must be 'shuffle' or 'token', got {control!r}")
    names = list(names) if names is not None else residual_layers(model)
    states = states if states is not None else collect_states(model, tokens, names)
    B, T = tokens.shape
    rows, pos = sample_positions(B, T, max_samples, seed)
    y = labels.numpy()[rows, pos]
    ctrl = (control_labels(y, seed=seed) if control == "shuffle"
            else token_control_labels(tokens.numpy()[rows, pos], y, seed))
    out = []
    for li, n in enumerate(names):
        X = states[n][rows, pos].numpy()
        res = probe_classification(X, y, groups=rows, seed=seed, C=C, max_iter=max_iter)
        ctl = probe_classification(X, ctrl, groups=rows, seed=seed, C=C, max_iter=max_iter)
        layer = 0 if n == "embed" else int(_RESID.match(n).group(1)) + 1 if _RESID.match(n) else li
        out.append(LayerProbe(n, layer, res.score, ctl.score, res.train_score, res))
    return out


def best_layer(accuracies: Sequence[float], tol: float = 0.005) -> int:
    """Index of the earliest entry within ``tol`` of the maximum (ties go to the earlier layer)."""
    acc = np.asarray(accuracies, dtype=float)
    if acc.size == 0:
        raise ValueError("best_layer needs at least one accuracy")
    return int(np.flatnonzero(acc >= acc.max() - tol)[0])
