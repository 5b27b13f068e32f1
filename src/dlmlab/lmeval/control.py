"""The cross-fitted control variate of the ``dlmlab`` Monte Carlo estimator (see :mod:`dlmlab.lmeval.estimators`).

A linear prediction of each masked position's cross-entropy from what is known without running the row:

    pred_i(M) = features_i(M) @ beta,   features: 1, t, t^2, c_i, c_i t, [i-1 in M], [i+1 in M],
               [i-2 in M] + [i+2 in M], c_i ([i-1 in M] + [i+1 in M]), one-hot(i)

with ``t = |M| / L`` and ``c_i`` position i's cross-entropy in the fully masked forward (a row every plan has).
The expectation of every feature given ``i in M`` and ``|M| = l`` is exact (a neighbour is masked with probability
``(l - 1) / (L - 1)``; the prompt before position 0 and nothing after position L - 1 never are), so

    row value = mean_{i in M} (CE_i - pred_i(M)) + mean_i E[pred_i | i in M, |M| = l]

is unbiased for ``f(l)`` whenever ``beta`` does not depend on the row: it is fitted (ridge, weighted ``1 / l`` as
the estimator weighs the row) on the *other* folds' rows only.
"""

from __future__ import annotations

import torch

RIDGE = 1e-3  # on the shared coefficients
POSITION_RIDGE = 0.03  # on the per-position intercepts (shrunk towards the shared prediction)
N_SHARED = 9


def features(masks: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Features [R, L, F] of each (row, position) and their expectations given ``i in M, |M| = l`` [R, L, F].

    ``masks`` [R, L] bool (rows with 1 <= l); ``c`` [L] the fully masked row's cross-entropies (float64).
    """
    R, L = masks.shape
    m = masks.double()
    l = m.sum(1, keepdim=True).expand(R, L)
    pad = torch.zeros(R, 2, dtype=torch.float64)
    mp = torch.cat([pad, m, pad], 1)  # the prompt side is never masked; past the end there is no token
    left1, right1, left2, right2 = mp[:, 1:L + 1], mp[:, 3:L + 3], mp[:, 0:L], mp[:, 4:L + 4]
    pos = torch.arange(L)[None]
    q = (l - 1) / max(L - 1, 1)  # P(j in M | i in M, |M| = l), j != i
    el1, er1, el2, er2 = q * (pos >= 1), q * (pos <= L - 2), q * (pos >= 2), q * (pos <= L - 3)
    t = l / L
    cc = c[None].expand(R, L)
    one = torch.ones(R, L, dtype=torch.float64)
    eye = torch.eye(L, dtype=torch.float64)[None].expand(R, L, L)
    x = torch.cat([torch.stack([one, t, t * t, cc, cc * t, left1, right1, left2 + right2, cc * (left1 + right1)], -1),
                   eye], -1)
    ex = torch.cat([torch.stack([one, t, t * t, cc, cc * t, el1, er1, el2 + er2, cc * (el1 + er1)], -1), eye], -1)
    return x, ex


def fit(x: torch.Tensor, masks: torch.Tensor, ce: torch.Tensor) -> torch.Tensor:
    """Ridge coefficients [F] from rows' features [R, L, F], masks [R, L] and cross-entropies [R, L] (masked
    entries only, each weighted ``1 / l``).  No rows: all zero (no control variate)."""
    F = x.shape[-1]
    if masks.shape[0] == 0:
        return torch.zeros(F, dtype=torch.float64)
    keep = masks.reshape(-1)
    w = (1.0 / masks.sum(1).double())[:, None].expand_as(ce).reshape(-1)[keep]
    X, y = x.reshape(-1, F)[keep], ce.double().reshape(-1)[keep]
    pen = torch.full((F,), RIDGE, dtype=torch.float64)
    pen[N_SHARED:] = POSITION_RIDGE
    return torch.linalg.solve(X.T @ (X * w[:, None]) + torch.diag(pen), X.T @ (y * w))


def row_values(masks: torch.Tensor, ce: torch.Tensor, c: torch.Tensor, folds: int) -> torch.Tensor:
    """Each row's unbiased estimate of ``f(|M|)`` [R] with the control variate fitted on the other folds
    (row r is in fold ``r % folds``)."""
    x, ex = features(masks, c)
    m = masks.double()
    ce = torch.where(masks, ce.double(), torch.zeros((), dtype=torch.float64))
    fold = torch.arange(masks.shape[0]) % folds
    out = torch.empty(masks.shape[0], dtype=torch.float64)
    for f in range(folds):
        mine, other = fold == f, fold != f
        if not mine.any():
            continue
        beta = fit(x[other], masks[other], ce[other])
        pred, epred = x[mine] @ beta, ex[mine] @ beta  # [r, L]
        out[mine] = ((ce[mine] - pred) * m[mine]).sum(1) / m[mine].sum(1) + epred.mean(1)
    return out


__all__ = ["features", "fit", "row_values"]
