"""The measurements issue 34 added to each model: controls and evaluations a claim can decide on.

* :func:`few_ids_accuracy`: forward accuracy per sequence on repeats drawn from few distinct ids (a token then
  occurs several times in a half, so one neighbour does not locate the source and two mostly do): the
  evaluation on which ``dlm_beats_ar_with_both_sides`` can see an AR below its ceiling;
* :func:`set_ablation_per_seq`: per-sequence accuracy with the induction-head set mean-ablated and with the
  other same-size set whose ablation lowers accuracy most (a paired comparison whose interval can reach any
  level, unlike a permutation over a handful of sets);
* :func:`probe_rmse`: the held-out RMSE (mask-rate units) of :func:`~dlmlab.analysis.timestep.mask_rate_probe`,
  recomputed exactly from its R^2 and its held-out labels (no new fit);
* :func:`composition_at_init`: the composition scores of the same-shape model at initialisation (the baseline
  of the Q-/K-composition claim).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dlmlab.analysis import circuits, fold, induction
from dlmlab.analysis.ablation import ablate_heads
from dlmlab.analysis.probes import _split
from dlmlab.objectives.mdlm import corrupt
from dlmlab.studies.induction.train import StudyObjective
from dlmlab.tasks.repeated import repeated_tokens

FEW_IDS_SEED = 7919  # the few-ids rows are the same for every training seed (generator FEW_IDS_SEED + ids)


def few_ids_tokens(n: int, half: int, lo: int, k: int) -> torch.Tensor:
    """[n, 2 * half] repeats whose tokens are uniform over the ``k`` ids [lo, lo + k) (repeats within a half)."""
    return repeated_tokens(n, half, lo, lo + k, torch.Generator().manual_seed(FEW_IDS_SEED + k))


def per_seq_fn(objective: StudyObjective, tokens: torch.Tensor, per_seq: int, seed: int):
    """model -> [B] forward accuracy per sequence (AR: left context; DLM: both neighbours visible)."""
    if not objective.masked:
        return lambda m: induction.ar_accuracy_per_seq(m, tokens, "forward")
    mask_id = objective.mask_id
    return lambda m: induction.dlm_accuracy_per_seq(m, tokens, mask_id, "forward", "both", per_seq, seed=seed)


@torch.no_grad()
def few_ids_accuracy(model, objective: StudyObjective, ids: list[int], n: int, half: int, lo: int, per_seq: int,
                     seed: int) -> dict:
    """``{str(k): {"accuracy": mean, "per_seq": [n], "chance": 1 / k}}`` for each id count ``k`` in ``ids``."""
    out = {}
    for k in ids:
        acc = per_seq_fn(objective, few_ids_tokens(n, half, lo, k), per_seq, seed)(model)
        out[str(k)] = {"accuracy": float(acc.mean()), "per_seq": acc.tolist(), "chance": 1.0 / k}
    return out


@torch.no_grad()
def set_ablation_per_seq(model, per_seq, heads: list, other_sets: list, other_drops: list,
                         means: dict) -> dict | None:
    """Per-sequence accuracy: unablated, with ``heads`` mean-ablated together, and with the set of
    ``other_sets`` whose (mean) drop in ``other_drops`` is largest; None without heads or other sets."""
    if not heads or not other_sets:
        return None
    best = max(range(len(other_drops)), key=lambda i: other_drops[i])
    other = [tuple(h) for h in other_sets[best]]
    res = {"base": per_seq(model).tolist(), "best_other_set": [list(h) for h in other]}
    with ablate_heads(model, [tuple(h) for h in heads], "mean", means):
        res["induction"] = per_seq(model).tolist()
    with ablate_heads(model, other, "mean", means):
        res["best_other"] = per_seq(model).tolist()
    return res


def probe_rmse(r2: float, tokens: torch.Tensor, mask_id: int, seed: int, t_range: tuple[float, float],
               positions_per_seq: int = 8, test_size: float = 0.25) -> float:
    """Held-out RMSE of ``timestep.mask_rate_probe(..., seed, t_range)`` given its held-out ``r2``: the same
    corruption draws and split as the probe, RMSE = sqrt((1 - R^2) var(held-out labels))."""
    B, T = tokens.shape
    lo, hi = t_range
    gen = torch.Generator().manual_seed(seed)
    t = lo + (hi - lo) * torch.rand(B, generator=gen)
    _, masked = corrupt(tokens, t, mask_id, gen)
    P = min(positions_per_seq, T)
    y = masked.float().mean(1)[:, None].expand(B, P).reshape(-1).numpy().astype(float)
    groups = torch.arange(B)[:, None].expand(B, P).reshape(-1).numpy()
    _, te = _split(len(y), test_size, seed, groups)
    var = float(np.var(y[te]))
    return math.sqrt(max(0.0, 1.0 - r2) * var)


@torch.no_grad()
def composition_at_init(init, objective: StudyObjective, fit_rows: torch.Tensor, layer: int, head: int) -> dict:
    """``{"Q"/"K"/"V": [L, H]}``: composition of each earlier head into (``layer``, ``head``) of the untrained
    model ``init``, folded as the trained model is (scales per position, from ``fit_rows``)."""
    scales = fold.norm_scales(init, fit_rows, per_position=True,
                              token_class=objective.mask_id if objective.masked else None)
    folded = fold.fold_ln_frozen_scale(init, scales).eval()
    return {k: circuits.composition_scores(folded, k)[:, :, layer, head] for k in circuits.COMPOSITIONS}
