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
  - otherwise row 0 masks the whole continuation: ``f(L)`` exactly, and every position's cross-entropy
    ``c_i`` with no continuation context.  The other ``mc_num - 1`` rows take counts stratified over 1..L-1
    (``l_j = floor((j + u)(L - 1) / (mc_num - 1)) + 1``), are split in ``FOLDS`` folds (row j in fold
    ``j mod FOLDS``: each fold stratified too), each fold's masks tiled along its own random permutation (a row's
    mask is a uniform l-subset; a fold's rows cover the positions evenly), and each row's masked
    cross-entropies get a control variate fitted on the other folds (:mod:`dlmlab.lmeval.control`: a ridge
    regression on ``c_i``, the mask rate, whether the neighbours are masked, and a per-position intercept, whose
    expectation over the row's uniform subset is exact).  ``NELBO = mean_i c_i + (L - 1) mean_j value_j``.
  - ``mc_num = 1`` (L >= 2): one row of a uniformly drawn count, ``(L / l) sum_{i in M} CE_i``.

Standard errors: rows come one per count stratum, so both use the collapsed-strata estimator (rows
sorted by count, adjacent pairs: ``Var(Y_a + Y_b) ~ (Y_a - Y_b)^2``): slightly conservative for ``llada``;
for ``dlmlab`` (whose fully masked row is exact) below the real spread, as the rows share the control
variate's coefficients: 0.89-0.95 of it at 16-32 forwards, down to 0.62 at 8 (benchmarks/bench_lmeval_mc.py
measures the ratio; docs/lm_eval.md quotes its run).  With one stratified row (``mc_num`` <= 2) it is NaN.
"""

from __future__ import annotations

import math

import torch

from dlmlab.errors import UserError
from dlmlab.lmeval import control

METHODS = ("llada", "dlmlab")
FOLDS = 8  # dlmlab: rows j = f (mod FOLDS) of the stratified rows form fold f


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
    if mc_num == 1:
        return _subset(L, int(stratified_counts(L, 1, generator)[0]), generator)[None]
    R = mc_num - 1
    counts = stratified_counts(L - 1, R, generator)
    masks = torch.zeros(R, L, dtype=torch.bool)
    for f in range(FOLDS):  # each fold tiles its rows along its own random permutation
        rows = list(range(f, R, FOLDS))
        perm = torch.randperm(L, generator=generator)
        c = counts[rows]
        for r, s, n in zip(rows, (torch.cumsum(c, 0) - c).tolist(), c.tolist()):
            masks[r, perm[(s + torch.arange(n)) % L]] = True
    return torch.cat([torch.ones(1, L, dtype=torch.bool), masks])


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


def row_values(method: str, masks: torch.Tensor, ce: torch.Tensor) -> torch.Tensor:
    """Each row's unbiased estimate [R]: of the NELBO (``llada``, and a one-row ``dlmlab`` plan), or of
    ``f(l)`` for the stratified rows 1.. of a ``dlmlab`` plan (row 0, fully masked, gets ``f(L)``)."""
    L = masks.shape[1]
    if method == "dlmlab" and _controlled(masks):
        c = ce[0].double()
        return torch.cat([c.mean()[None], control.row_values(masks[1:], ce[1:], c, FOLDS)])
    ce = torch.where(masks, ce.double(), torch.zeros((), dtype=torch.float64))
    return L / masks.double().sum(1) * ce.sum(1)


def _controlled(masks: torch.Tensor) -> bool:
    """A ``dlmlab`` plan of the fully masked row and stratified rows (not one row, not the enumeration)."""
    return masks.shape[0] >= 2 and bool(masks[0].all())


def combine(method: str, masks: torch.Tensor, ce: torch.Tensor) -> tuple[float, float]:
    """(NELBO, standard error) from masks [R, L] and cross-entropies ce [R, L] (read where masked)."""
    if masks.shape[1] == 0:
        return 0.0, 0.0
    L = masks.shape[1]
    if method == "dlmlab" and masks.shape[0] == 2 ** L - 1 and torch.equal(masks, exact_masks(L)):
        ce = torch.where(masks, ce.double(), torch.zeros((), dtype=torch.float64))
        return float((exact_weights(masks) * ce.sum(1)).sum()), 0.0
    y = row_values(method, masks, ce)
    if method == "dlmlab" and _controlled(masks):
        rest = y[1:]
        return float(y[0] + (L - 1) * rest.mean()), (L - 1) * _collapsed_se(rest, masks[1:].sum(1))
    return float(y.mean()), _collapsed_se(y, masks.sum(1))


__all__ = ["METHODS", "plan", "combine", "row_values", "exact_masks", "is_exact", "llada_counts",
           "stratified_counts"]
