"""Correlation of forward vs reverse attention scores on the evidence token.

In the forward query ("[M] is B", mask at i, B at i+d) and the reverse query ("B is [M]", B at i,
mask at i+d) the same W_Q / W_K score the mask against B, only the relative offset flips sign.
With ALiBi (no position inside q, k) the two scores coincide; with RoPE they are
``q^T R(d) k`` vs ``q^T R(-d) k``, positively correlated for small d; with learned absolute
positions nothing ties them.  :func:`score_correlation` measures this on a trained model:
the Pearson correlation, across facts, of the pre-softmax score from the query to the evidence
token in the forward and in the reverse query, per head and pooled.  Needs a toolkit Transformer
(:func:`~dlmlab.studies.reversal.storage_routing.attention_scores`); any other model raises
:class:`~dlmlab.analysis.requires.UnsupportedModel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlmlab.analysis.requires import require_transformer
from dlmlab.studies.reversal.storage_routing import attention_scores
from dlmlab.tasks.relations import Queries

ANALYSIS_MODULE = True  # refusals name this module's public functions (analysis.requires.public_name)


def evidence_scores(model, q: Queries, layer: int = 0) -> torch.Tensor:
    """Pre-softmax score [N, H] from each query position to its evidence position."""
    require_transformer(model, "evidence_scores", ("q", "k"))
    s = attention_scores(model, q.tokens, layer)  # [N,H,T,T]
    rows = torch.arange(len(q), device=q.tokens.device)
    return s[rows, :, q.query_pos, q.evidence_pos]


def pearson(x: torch.Tensor, y: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Pearson correlation along ``dim`` (NaN where a side is constant)."""
    x = x.double() - x.double().mean(dim, keepdim=True)
    y = y.double() - y.double().mean(dim, keepdim=True)
    den = (x.pow(2).sum(dim) * y.pow(2).sum(dim)).sqrt()
    return torch.where(den > 1e-12, (x * y).sum(dim) / den.clamp(min=1e-300), torch.full_like(den, float("nan")))


@dataclass
class ScoreCorrelation:
    """per_head [H]: correlation across facts; pooled: over all (fact, head) scores after removing each
    head's mean; forward / reverse [N, H]: the scores."""

    per_head: torch.Tensor
    pooled: float
    forward: torch.Tensor
    reverse: torch.Tensor


def score_correlation(model, fwd: Queries, rev: Queries, layer: int = 0) -> ScoreCorrelation:
    """Correlate forward and reverse evidence scores; ``fwd`` and ``rev`` list the same facts in the same order."""
    if len(fwd) != len(rev):
        raise ValueError(f"forward ({len(fwd)}) and reverse ({len(rev)}) queries must pair up one to one")
    f, r = evidence_scores(model, fwd, layer), evidence_scores(model, rev, layer)
    pooled = pearson((f - f.mean(0)).flatten(), (r - r.mean(0)).flatten())
    return ScoreCorrelation(per_head=pearson(f, r, 0), pooled=float(pooled), forward=f, reverse=r)


@dataclass
class DistanceProfile:
    """The positional part of the query->evidence score: forward / reverse [D, H] = score at each distance
    averaged over the facts (the fact-specific content averaged out), ``distances`` [D]; per_head [H]: Pearson
    correlation across distances of the forward and the reverse profile; correlation: their mean over heads
    (NaN heads skipped)."""

    distances: list[int]
    forward: torch.Tensor
    reverse: torch.Tensor
    per_head: torch.Tensor
    correlation: float


def distance_profile(model, pairs: dict[int, tuple[Queries, Queries]], layer: int = 0) -> DistanceProfile:
    """``pairs``: distance -> (forward, reverse) queries at that distance (>= 3 distances).

    The forward query reads its evidence ``d`` positions to the right, the reverse ``d`` to the left; with
    ALiBi both profiles are ``content - m_h d`` (correlation exactly 1), with RoPE ``q^T R(+-d) k`` averaged
    over facts, with learned positions two unrelated sets of position pairs."""
    if len(pairs) < 3:
        raise ValueError(f"a correlation across distances needs >= 3 distances, got {len(pairs)}")
    ds = sorted(pairs)
    f = torch.stack([evidence_scores(model, pairs[d][0], layer).double().mean(0) for d in ds])  # [D,H]
    r = torch.stack([evidence_scores(model, pairs[d][1], layer).double().mean(0) for d in ds])
    per_head = pearson(f, r, 0)
    ok = torch.isfinite(per_head)
    return DistanceProfile(ds, f, r, per_head, float(per_head[ok].mean()) if ok.any() else float("nan"))
