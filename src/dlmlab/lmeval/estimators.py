"""Monte Carlo estimators of a masked-diffusion model's log-likelihood bound of a continuation given a prompt.

For a continuation of ``L`` tokens after a prompt that is never masked, the masked-diffusion ELBO
(continuous time, any noise schedule: the schedule only reparametrises time) is

    -log p(x | prompt) <= NELBO = sum_{l=1..L} f(l),
    f(l) = E_{M uniform among the l-subsets of the continuation} [ mean_{i in M} CE_i(x with M masked) ],

``CE_i`` the cross-entropy of the clean token at masked position ``i`` (over the vocabulary without the
mask token, as dlmlab's objective scores it).  An estimator plans rows (masks ``M`` [R, L] bool), the
model runs one forward per row, and :func:`combine` turns the cross-entropies ``ce`` [R, L] into
``(nelbo, standard_error)``.

* ``llada``: LLaDA's and Dream's evaluation estimator.  ``mc_num`` rows in batches of ``batch`` rows;
  per batch one random start ``k`` and mask counts evenly spaced from it (mod L), each row masking a
  uniformly drawn subset of that many positions; row value ``(L / l) * sum_{i in M} CE_i``; the mean.
* ``dlmlab`` (this module's design), unbiased for the same NELBO:

  - exact when ``2^L - 1 <= mc_num``: every non-empty subset once, weighted ``1 / (l * C(L, l))``
    (standard error 0);
  - otherwise counts stratified over all ``mc_num`` rows at once (``l_j = floor((j + u) L / K) + 1``),
    rows split in two folds (alternate counts, so each fold is stratified too), each fold's masks tiled
    along its own random permutation (a row's mask is a uniform l-subset; a fold's consecutive rows mask
    consecutive stretches of the permutation, so positions are covered evenly), and a cross-fitted
    control variate for position difficulty: a position's difficulty ``d_i`` is its mean residual
    ``CE_i - mean_{j in M} CE_j`` over the *other* fold's rows (shrunk to 0 by one pseudo-count), and a row
    scores ``(L / l) sum_{i in M} (CE_i - d_i) + sum_i d_i``: unbiased given the other fold, since a
    uniform l-subset's mean of ``d`` is the mean of ``d`` and the folds' permutations are independent.

Standard errors: rows come one per count stratum, so both use the collapsed-strata estimator (rows
sorted by count, adjacent pairs: ``Var(Y_a + Y_b) ~ (Y_a - Y_b)^2``), slightly conservative.
"""

from __future__ import annotations

import math

import torch

from dlmlab.errors import UserError

METHODS = ("llada", "dlmlab")
FOLDS = 2  # dlmlab: rows j = f (mod FOLDS) form fold f


def _check(method: str, L: int, mc_num: int) -> None:
    if method not in METHODS:
        raise UserError(f"unknown estimator {method!r}; choose one of {', '.join(METHODS)}")
    if mc_num < 1:
        raise UserError(f"mc_num must be >= 1, got {mc_num}")
    if L < 0:
        raise ValueError(f"continuation length must be >= 0, got {L}")


def _subset(L: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """One uniformly drawn ``count``-subset of ``L`` positions as a bool [L]."""
    m = torch.zeros(L, dtype=torch.bool)
    m[torch.randperm(L, generator=generator)[:count]] = True
    return m


def llada_counts(L: int, batch: int, generator: torch.Generator) -> torch.Tensor:
    """Mask counts [batch] in 1..L of one LLaDA batch: a random start, then evenly spaced (mod L)."""
    k = int(torch.randint(1, L + 1, (), generator=generator))
    x = torch.round(torch.linspace(float(k), k + (batch - 1) * (L / batch), batch)).long()
    return (x - 1) % L + 1


def stratified_counts(L: int, K: int, generator: torch.Generator) -> torch.Tensor:
    """Counts [K] in 1..L, one per stratum of [0, L): ``floor((j + u) L / K) + 1`` (uniform marginally)."""
    u = float(torch.rand((), generator=generator))
    j = torch.arange(K, dtype=torch.float64)
    return (torch.floor((j + u) * L / K).long() + 1).clamp(1, L)


def exact_masks(L: int) -> torch.Tensor:
    """Every non-empty subset of L positions [2^L - 1, L] bool."""
    rows = [[(s >> i) & 1 == 1 for i in range(L)] for s in range(1, 2 ** L)]
    return torch.tensor(rows, dtype=torch.bool).reshape(-1, L)


def is_exact(method: str, L: int, mc_num: int) -> bool:
    """True when ``dlmlab`` enumerates every subset (``2^L - 1 <= mc_num``)."""
    return method == "dlmlab" and L <= 20 and 2 ** L - 1 <= mc_num


def plan(method: str, L: int, mc_num: int, generator: torch.Generator, batch: int = 32) -> torch.Tensor:
    """Masks [R, L] bool over the continuation (R rows = forwards; R <= mc_num).

    ``batch``: LLaDA's batch (rows sharing one start ``k``); ``mc_num`` is rounded up to a multiple of it.
    """
    _check(method, L, mc_num)
    if L == 0:
        return torch.zeros(0, 0, dtype=torch.bool)
    if method == "llada":
        b = max(1, min(batch, mc_num))
        counts = torch.cat([llada_counts(L, b, generator) for _ in range(math.ceil(mc_num / b))])
        return torch.stack([_subset(L, int(c), generator) for c in counts])
    if is_exact(method, L, mc_num):
        return exact_masks(L)
    counts = stratified_counts(L, mc_num, generator)
    masks = torch.zeros(mc_num, L, dtype=torch.bool)
    for f in range(FOLDS):  # each fold tiles its rows along its own random permutation
        rows = list(range(f, mc_num, FOLDS))
        perm = torch.randperm(L, generator=generator)
        c = counts[rows]
        for r, s, n in zip(rows, (torch.cumsum(c, 0) - c).tolist(), c.tolist()):
            masks[r, perm[(s + torch.arange(n)) % L]] = True
    return masks


def _collapsed_se(values: torch.Tensor, counts: torch.Tensor) -> float:
    """Standard error of ``values.mean()`` for one value per count stratum (adjacent pairs by count)."""
    R = values.numel()
    if R < 2:
        return float("nan")
    y = values[torch.argsort(counts, stable=True)].double()
    pairs = y[: R - R % 2].view(-1, 2)
    var_sum = ((pairs[:, 0] - pairs[:, 1]) ** 2).sum()
    if R % 2:  # the odd row out: paired with its neighbour once more
        var_sum = var_sum + (y[-1] - y[-2]) ** 2 / 2
    return float(var_sum.sqrt() / R)


def exact_weights(masks: torch.Tensor) -> torch.Tensor:
    """Weight [R] of each subset row in the exact NELBO: ``1 / (l * C(L, l))``."""
    L = masks.shape[1]
    counts = masks.sum(1)
    return torch.tensor([1.0 / (c * math.comb(L, c)) for c in counts.tolist()], dtype=torch.float64)


def _difficulty(ce: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Per-position difficulty [L]: mean residual ``CE_i - row mean`` over the rows masking i, shrunk by 1."""
    m = masks.double()
    row_mean = (ce * m).sum(1) / m.sum(1).clamp(min=1)
    resid = (ce - row_mean[:, None]) * m
    return resid.sum(0) / (m.sum(0) + 1.0)


def row_values(method: str, masks: torch.Tensor, ce: torch.Tensor) -> torch.Tensor:
    """Each row's unbiased estimate of the NELBO [R] (not for the exact enumeration)."""
    m = masks.double()
    ce = torch.where(masks, ce.double(), torch.zeros((), dtype=torch.float64))
    L = masks.shape[1]
    counts = m.sum(1)
    if method == "llada":
        return L / counts * ce.sum(1)
    fold = torch.arange(masks.shape[0]) % FOLDS
    out = torch.empty(masks.shape[0], dtype=torch.float64)
    for f in range(FOLDS):
        mine, other = fold == f, fold != f
        d = _difficulty(ce[other], masks[other]) if other.any() else torch.zeros(L, dtype=torch.float64)
        adj = (ce[mine] - d[None]) * m[mine]
        out[mine] = L / counts[mine] * adj.sum(1) + d.sum()
    return out


def combine(method: str, masks: torch.Tensor, ce: torch.Tensor) -> tuple[float, float]:
    """(NELBO, standard error) from masks [R, L] and cross-entropies ce [R, L] (read where masked)."""
    if masks.shape[1] == 0:
        return 0.0, 0.0
    L = masks.shape[1]
    if method == "dlmlab" and masks.shape[0] == 2 ** L - 1 and torch.equal(masks, exact_masks(L)):
        ce = torch.where(masks, ce.double(), torch.zeros((), dtype=torch.float64))
        return float((exact_weights(masks) * ce.sum(1)).sum()), 0.0
    y = row_values(method, masks, ce)
    return float(y.mean()), _collapsed_se(y, masks.sum(1))


__all__ = ["METHODS", "plan", "combine", "row_values", "exact_masks", "is_exact", "llada_counts",
           "stratified_counts"]
