"""The cross-fitted control variate of the ``dlmlab`` Monte Carlo estimator (see :mod:`dlmlab.lmeval.estimators`).

A linear prediction of each masked position's cross-entropy from what is known without running the row:

    pred_i(M) = shared_i(M) @ beta + local_i(M) @ gamma_i
    shared: 1, t, t^2, c_i, c_i t, [i-1 in M], [i+1 in M], [i-2 in M] + [i+2 in M], c_i ([i-1 in M] + [i+1 in M])
    local:  1, [i-2 in M], [i-1 in M], [i+1 in M], [i+2 in M]      (coefficients per position i)

with ``t = |M| / L`` and ``c_i`` position i's cross-entropy in the fully masked forward (a row every plan has).
The local terms carry most of the gain: whether a position's own neighbours are visible is what moves its
cross-entropy most from one mask to another.  The expectation of every feature given ``i in M`` and ``|M| = l``
is exact (a neighbour is masked with probability ``(l - 1) / (L - 1)``; the prompt before position 0 and nothing
after position L - 1 never are), so

    row value = mean_{i in M} (CE_i - pred_i(M)) + mean_i E[pred_i | i in M, |M| = l]

is unbiased for ``f(l)`` whenever the coefficients do not depend on the row: they are fitted on the *other*
folds' rows only (ridge, each masked entry weighted ``1 / l`` as the estimator weighs it; ``beta`` first, then
each position's ``gamma_i`` on what ``beta`` leaves).  Memory and time are linear in the continuation length.
"""

from __future__ import annotations

import torch

SHARED_RIDGE = 1e-3
LOCAL_RIDGE = 0.03  # per position: shrinks its intercept and neighbour effects towards 0 (the shared fit)
OFFSETS = (-2, -1, 1, 2)  # the neighbours of the local features


def _neighbours(masks: torch.Tensor, offsets) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether position i + d is masked [R, L, len(offsets)], and its probability given i in M, |M| [R, L, ...]."""
    R, L = masks.shape
    P = max(abs(d) for d in offsets)
    mp = torch.cat([torch.zeros(R, P), masks.double(), torch.zeros(R, P)], 1).double()
    q = (masks.double().sum(1, keepdim=True) - 1) / max(L - 1, 1)  # P(j in M | i in M, |M| = l), j != i
    pos = torch.arange(L)[None]
    n = torch.stack([mp[:, P + d:L + P + d] for d in offsets], -1)
    en = torch.stack([q * ((pos + d >= 0) & (pos + d < L)) for d in offsets], -1)
    return n, en


def features(masks: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(shared [R, L, 9], its expectation given ``i in M, |M| = l`` [R, L, 9], local [R, L, 5], its expectation).

    ``masks`` [R, L] bool (rows with 1 <= l); ``c`` [L] the fully masked row's cross-entropies (float64).
    """
    R, L = masks.shape
    n, en = _neighbours(masks, (-2, -1, 1, 2))
    left1, right1, two = n[..., 1], n[..., 2], n[..., 0] + n[..., 3]
    el1, er1, etwo = en[..., 1], en[..., 2], en[..., 0] + en[..., 3]
    t = masks.double().sum(1, keepdim=True).expand(R, L) / L
    cc = c.double()[None].expand(R, L)
    one = torch.ones(R, L, dtype=torch.float64)
    shared = torch.stack([one, t, t * t, cc, cc * t, left1, right1, two, cc * (left1 + right1)], -1)
    eshared = torch.stack([one, t, t * t, cc, cc * t, el1, er1, etwo, cc * (el1 + er1)], -1)
    n, en = _neighbours(masks, OFFSETS)
    return shared, eshared, torch.cat([one[..., None], n], -1), torch.cat([one[..., None], en], -1)


def _weights(masks: torch.Tensor) -> torch.Tensor:
    """Each masked entry's weight ``1 / l`` (0 where not masked) [R, L]."""
    return masks.double() / masks.sum(1, keepdim=True).clamp(min=1).double()


def fit(shared: torch.Tensor, local: torch.Tensor, masks: torch.Tensor, ce: torch.Tensor):
    """(beta [9], gamma [L, 5]) from rows' features, masks [R, L] and cross-entropies [R, L]; no rows: zeros."""
    L = masks.shape[1]
    beta = torch.zeros(shared.shape[-1], dtype=torch.float64)
    gamma = torch.zeros(L, local.shape[-1], dtype=torch.float64)
    if masks.shape[0] == 0:
        return beta, gamma
    w = _weights(masks)
    y = torch.where(masks, ce.double(), torch.zeros((), dtype=torch.float64))
    F = shared.shape[-1]
    A = torch.einsum("rlf,rlg,rl->fg", shared, shared, w) + SHARED_RIDGE * torch.eye(F, dtype=torch.float64)
    beta = torch.linalg.solve(A, torch.einsum("rlf,rl->f", shared, w * y))
    resid = (y - shared @ beta) * masks
    G = local.shape[-1]
    A = torch.einsum("rlf,rlg,rl->lfg", local, local, w) + LOCAL_RIDGE * torch.eye(G, dtype=torch.float64)
    gamma = torch.linalg.solve(A, torch.einsum("rlf,rl->lf", local, w * resid)[..., None])[..., 0]
    return beta, gamma


def row_values(masks: torch.Tensor, ce: torch.Tensor, c: torch.Tensor, folds: int) -> torch.Tensor:
    """Each row's unbiased estimate of ``f(|M|)`` [R] with the control variate fitted on the other folds
    (row r is in fold ``r % folds``)."""
    shared, eshared, local, elocal = features(masks, c)
    m = masks.double()
    ce = torch.where(masks, ce.double(), torch.zeros((), dtype=torch.float64))
    fold = torch.arange(masks.shape[0]) % folds
    out = torch.empty(masks.shape[0], dtype=torch.float64)
    for f in range(folds):
        mine, other = fold == f, fold != f
        if not mine.any():
            continue
        beta, gamma = fit(shared[other], local[other], masks[other], ce[other])
        pred = shared[mine] @ beta + (local[mine] * gamma[None]).sum(-1)  # [r, L]
        epred = eshared[mine] @ beta + (elocal[mine] * gamma[None]).sum(-1)
        out[mine] = ((ce[mine] - pred) * m[mine]).sum(1) / m[mine].sum(1) + epred.mean(1)
    return out


__all__ = ["features", "fit", "row_values", "OFFSETS"]
