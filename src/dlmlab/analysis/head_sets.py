"""Ablating a *set* of heads together, against random head sets of the same size (the control).

    heads = heads_above(scores, threshold, min_layer=1)        # [(layer, head)] with score > threshold
    res = set_ablation_test(model, metric, heads, pool, means, n_random=200, seed=0)
    res.drop, res.random_drops, res.p95, res.control()          # base - ablated; control drops; 95th pct; p-value

``pool`` is where the random sets are drawn from (e.g. every head of the layers the set was
selected from); each random set is ``len(heads)`` distinct heads of ``pool``, never equal to the
set itself, drawn with a seeded generator (so the control is reproducible).  When the pool has no
more than ``n_random`` other sets of that size (e.g. 4 heads in the pool: at most 6), the control
is *exhaustive*: every other set once, and :meth:`SetAblation.control` is the exact permutation
p-value over all sets, whose smallest possible value is ``1 / C(len(pool), len(heads))``
(:attr:`SetAblation.min_p`): a pool that small cannot give p <= 0.05 however large the drop.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from dlmlab.analysis.ablation import ablate_heads
from dlmlab.analysis.requires import require_attention
from dlmlab.report.intervals import MIN_CONTROL_DRAWS, control_test

Head = tuple[int, int]


def heads_above(scores: torch.Tensor, threshold: float, min_layer: int = 0) -> list[Head]:
    """[(layer, head)] of ``scores`` [L, H] strictly above ``threshold`` in layers >= ``min_layer``."""
    idx = (torch.as_tensor(scores) > threshold).nonzero().tolist()
    return [(int(li), int(h)) for li, h in idx if li >= min_layer]


def layer_pool(n_layers: int, n_heads: int, min_layer: int = 0) -> list[Head]:
    """Every (layer, head) with layer >= ``min_layer``."""
    return [(li, h) for li in range(min_layer, n_layers) for h in range(n_heads)]


def random_sets(pool: Sequence[Head], size: int, n: int, exclude: Sequence[Head] = (), seed: int = 0) -> list[list[Head]]:
    """``n`` random sets of ``size`` distinct heads of ``pool``, none equal to ``exclude`` (as a set)."""
    pool = list(pool)
    if not 1 <= size <= len(pool):
        raise ValueError(f"set size must be in [1, {len(pool)}], got {size}")
    if math.comb(len(pool), size) == 1 and set(map(tuple, exclude)) == set(pool):
        raise ValueError("no random set differs from the excluded one")
    gen = torch.Generator().manual_seed(seed)
    out, ex = [], set(map(tuple, exclude))
    while len(out) < n:
        pick = torch.randperm(len(pool), generator=gen)[:size].tolist()
        s = sorted(pool[i] for i in pick)
        if set(s) != ex:
            out.append(s)
    return out


def other_sets(pool: Sequence[Head], size: int, exclude: Sequence[Head] = ()) -> list[list[Head]]:
    """Every set of ``size`` distinct heads of ``pool`` except ``exclude`` (as a set), in a fixed order."""
    pool = sorted(map(tuple, pool))
    if not 1 <= size <= len(pool):
        raise ValueError(f"set size must be in [1, {len(pool)}], got {size}")
    ex = set(map(tuple, exclude))
    return [list(s) for s in itertools.combinations(pool, size) if set(s) != ex]


@dataclass
class SetAblation:
    heads: list[Head]
    base: float
    drop: float  # base - metric with ``heads`` ablated together
    random_sets: list[list[Head]]
    random_drops: list[float]
    exhaustive: bool = False  # random_sets are every other same-size set of the pool (not random draws)
    n_sets: int = 0  # C(len(pool), len(heads)): every same-size set of the pool, the set itself included

    @property
    def min_p(self) -> float:
        """The smallest p-value the control can give: 1 / (1 + number of control sets)."""
        return 1.0 / (1 + len(self.random_drops)) if self.random_drops else float("nan")

    def control(self):
        """:class:`~dlmlab.report.intervals.ControlTest` of the drop against the control drops: the exact
        permutation p-value over every set when exhaustive, else over the (>= 200) random draws."""
        if not self.random_drops:
            return None
        need = len(self.random_drops) if self.exhaustive else MIN_CONTROL_DRAWS
        return control_test(self.drop, self.random_drops, side=1, min_draws=need)

    @property
    def p95(self) -> float:
        return float(np.percentile(self.random_drops, 95)) if self.random_drops else float("nan")

    def to_dict(self) -> dict:
        enough = self.exhaustive or len(self.random_drops) >= MIN_CONTROL_DRAWS
        c = self.control() if self.random_drops and enough else None
        return {"heads": [list(h) for h in self.heads], "base": self.base, "drop": self.drop,
                "random_sets": [[list(h) for h in s] for s in self.random_sets], "random_drops": self.random_drops,
                "random_p95": self.p95, "exhaustive": self.exhaustive, "n_sets": self.n_sets,
                "min_p": self.min_p, "control": c.as_dict() if c is not None else None}


def set_ablation_test(model, metric: Callable[[object], float], heads: Sequence[Head], pool: Sequence[Head],
                      means: dict[int, torch.Tensor] | None = None, kind: str = "mean", n_random: int = 20,
                      seed: int = 0) -> SetAblation:
    """Drop of ``metric`` when ``heads`` are ablated together vs ``n_random`` random same-size sets of ``pool``
    (every other same-size set once when there are no more than ``n_random`` of them: exhaustive)."""
    require_attention(model, "set_ablation_test", points=("z",))
    heads = sorted(tuple(h) for h in heads)
    base = float(metric(model))
    if not heads:
        return SetAblation([], base, float("nan"), [], [])

    def drop(hs: Sequence[Head]) -> float:
        with ablate_heads(model, hs, kind, means):
            return base - float(metric(model))

    n_sets = math.comb(len(pool), len(heads))
    exhaustive = n_sets - 1 <= n_random
    sets = other_sets(pool, len(heads), heads) if exhaustive else random_sets(pool, len(heads), n_random,
                                                                              exclude=heads, seed=seed)
    return SetAblation(list(heads), base, drop(heads), sets, [drop(s) for s in sets], exhaustive, n_sets)
