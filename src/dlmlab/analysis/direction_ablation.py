"""Ablate directions of a residual stream and measure the task-accuracy drop.

Works on any toolkit model (hook names) that outputs per-position logits [B, T, C].

* :func:`project_out` -> ``fn(x)`` removing the span of ``basis`` [k, D] from x [..., D]
  (zero-ablation of those directions: the component along them is set to 0);
* :func:`probe_basis` (rows of a logistic probe, back in raw activation space),
  :func:`pca_basis` (top principal directions), :func:`random_basis` (control);
* :func:`tagging_accuracy` -> accuracy of argmax logits against labels, optionally under
  interventions ``{hook: fn}``;
* :func:`per_sequence_accuracy` -> [B] accuracy of each sequence (same interventions);
* :func:`ablation_drops` -> for several bases and several evaluation sets (e.g. lengths
  40 ... 120), base accuracy, ablated accuracy and drop.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import torch

from dlmlab.analysis.probes import ProbeResult


def orthonormal(basis, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[k, D] -> orthonormal rows spanning the same space (computed in float64, returned in ``dtype``);
    zero rows dropped."""
    b = torch.as_tensor(np.asarray(basis, dtype=np.float64) if not isinstance(basis, torch.Tensor) else basis)
    b = b.double().reshape(-1, b.shape[-1])
    if b.shape[0] == 0:
        raise ValueError("basis must have at least one direction")
    q, r = torch.linalg.qr(b.T)
    keep = r.diagonal().abs() > 1e-8 * max(1.0, float(r.diagonal().abs().max()))
    return q[:, keep].T.to(dtype)


def project_out(basis) -> Callable[[torch.Tensor], torch.Tensor]:
    """fn(x [..., D]) -> x minus its projection on span(basis [k, D])."""
    q = orthonormal(basis, torch.float64)  # cast to each input's dtype below

    def fn(x: torch.Tensor) -> torch.Tensor:
        qq = q.to(x.device, x.dtype)
        return x - (x @ qq.T) @ qq

    return fn


def probe_basis(probe: ProbeResult) -> np.ndarray:
    """All class rows of a (multinomial) logistic probe mapped to raw space -> [C or 1, D]."""
    coef = np.atleast_2d(probe.model.coef_)
    scale = np.where(probe.scaler.scale_ > 0, probe.scaler.scale_, 1.0)
    return coef / scale


def pca_basis(X, k: int) -> np.ndarray:
    """Top-``k`` principal directions of X [N, D] -> [k, D] (rows orthonormal)."""
    X = np.asarray(X.numpy() if isinstance(X, torch.Tensor) else X, dtype=np.float64)
    if not 1 <= k <= X.shape[1]:
        raise ValueError(f"k must be in [1, {X.shape[1]}], got {k}")
    _, _, vt = np.linalg.svd(X - X.mean(0), full_matrices=False)
    return vt[:k]


def random_basis(d: int, k: int, seed: int = 0) -> np.ndarray:
    """``k`` random orthonormal directions in R^d -> [k, d]."""
    g = np.random.default_rng(seed).standard_normal((d, k))
    q, _ = np.linalg.qr(g)
    return q.T


def _hits(model, tokens: torch.Tensor, labels: torch.Tensor, interventions: Mapping[str, Callable] | None,
          batch_size: int) -> list[torch.Tensor]:
    """Per batch, [b, T] bool: argmax logits == labels (eval mode, ``interventions`` as in ``model.replace``)."""
    if labels.shape != tokens.shape:
        raise ValueError(f"labels {tuple(labels.shape)} must match tokens {tuple(tokens.shape)}")
    was_training = model.training
    model.eval()
    out = []
    try:
        for i in range(0, tokens.shape[0], batch_size):
            x = tokens[i:i + batch_size]
            if interventions:
                with model.replace(dict(interventions)):
                    logits = model(x)
            else:
                logits = model(x)
            out.append(logits.argmax(-1).cpu() == labels[i:i + batch_size])
    finally:
        model.train(was_training)
    return out


@torch.no_grad()
def tagging_accuracy(model, tokens: torch.Tensor, labels: torch.Tensor,
                     interventions: Mapping[str, Callable] | None = None, batch_size: int = 256) -> float:
    """Fraction of positions where argmax logits == labels; ``interventions`` as in ``model.replace``."""
    correct = sum(int(h.sum()) for h in _hits(model, tokens, labels, interventions, batch_size))
    return correct / max(1, labels.numel())


@torch.no_grad()
def per_sequence_accuracy(model, tokens: torch.Tensor, labels: torch.Tensor,
                          interventions: Mapping[str, Callable] | None = None, batch_size: int = 256) -> np.ndarray:
    """tokens, labels [B, T] -> [B] fraction of each sequence's positions where argmax logits == labels."""
    out = [h.double().mean(-1).numpy() for h in _hits(model, tokens, labels, interventions, batch_size)]
    return np.concatenate(out) if out else np.zeros(0)


def ablation_drops(model, eval_sets: Mapping, hook: str, bases: Mapping[str, object],
                   batch_size: int = 256) -> dict:
    """Accuracy drop from projecting out each basis at ``hook`` on each evaluation set.

    eval_sets: {key (e.g. length): (tokens [B,T], labels [B,T])}; bases: {kind: [k, D]}.
    Returns {kind: {key: {"base": acc, "ablated": acc, "drop": base - ablated}}}.
    """
    base = {k: tagging_accuracy(model, x, y, batch_size=batch_size) for k, (x, y) in eval_sets.items()}
    out: dict = {}
    for kind, basis in bases.items():
        fn = project_out(basis)
        out[kind] = {}
        for key, (x, y) in eval_sets.items():
            acc = tagging_accuracy(model, x, y, {hook: fn}, batch_size=batch_size)
            out[kind][key] = {"base": base[key], "ablated": acc, "drop": base[key] - acc}
    return out


def random_subspace_drops(model, tokens: torch.Tensor, labels: torch.Tensor, hook: str, d: int, k: int, n: int,
                          seed: int = 0, batch_size: int = 256) -> np.ndarray:
    """Accuracy drops from projecting out ``n`` random rank-``k`` subspaces of the width-``d`` activation at ``hook``
    (the random control's distribution, e.g. for :func:`dlmlab.report.intervals.control_test`) -> [n]; draw ``i``
    uses :func:`random_basis` seed ``seed + i``."""
    base = tagging_accuracy(model, tokens, labels, batch_size=batch_size)
    return np.array([base - tagging_accuracy(model, tokens, labels, {hook: project_out(random_basis(d, k, seed + i))},
                                             batch_size=batch_size) for i in range(n)])
