"""Query-level evaluation for relation / reversal experiments, usable on any toolkit language model.

A query (:class:`dlmlab.tasks.relations.Queries`) asks for one token at one position of a
sequence (the mask position of an MDM query, the last input position of an AR query).
``query_log_probs`` returns the model's log-distribution there; ``query_eval`` reduces it to
accuracy and the probability of the correct token, the quantity tracked over forward-only
training to see whether the reverse query improves without ever being trained.
"""

from __future__ import annotations

import torch

from dlmlab.models.precision import upcast
from dlmlab.tasks.relations import Queries

ANALYSIS_MODULE = True  # refusals name this module's public functions (analysis.requires.public_name)


def query_log_probs(model, q: Queries, exclude: tuple[int, ...] = (), **forward_kwargs) -> torch.Tensor:
    """log p(. | query) [N, V] at each query position; ``exclude`` ids (e.g. the mask) get -inf."""
    logits = model(q.tokens, **forward_kwargs)  # [N,T,V]
    at = upcast(logits[torch.arange(len(q), device=logits.device), q.query_pos])  # [N,V], float64 kept
    if exclude:
        at = at.clone()
        at[:, list(exclude)] = float("-inf")
    return at.log_softmax(-1)


@torch.no_grad()
def query_eval(model, q: Queries, exclude: tuple[int, ...] = (), **forward_kwargs) -> dict[str, float]:
    """{acc, p_correct, nll, rank} averaged over the queries (rank 0 = the target is the argmax).

    ``p_correct`` is the mean probability of the target token: the "reverse probability" when ``q``
    are reverse queries.
    """
    was_training = model.training
    model.eval()
    lp = query_log_probs(model, q, exclude, **forward_kwargs)
    if was_training:
        model.train()
    tgt = lp.gather(1, q.target[:, None]).squeeze(1)  # [N]
    rank = (lp > tgt[:, None]).sum(1).float()
    return {
        "acc": float((rank == 0).float().mean()),
        "p_correct": float(tgt.exp().mean()),
        "nll": float(-tgt.mean()),
        "rank": float(rank.mean()),
    }


def query_loss(model, q: Queries, exclude: tuple[int, ...] = (), **forward_kwargs) -> torch.Tensor:
    """Mean NLL of the targets (differentiable): the forward / reverse loss of a query set."""
    lp = query_log_probs(model, q, exclude, **forward_kwargs)
    return -lp.gather(1, q.target[:, None]).mean()
