"""Attention-pattern head scores: how much each head attends to a chosen key position.

Works on any toolkit model exposing ``blocks.{i}.attn.pattern`` [B, H, Tq, Tk] hook points (attention
models); any other raises :class:`~dlmlab.analysis.requires.UnsupportedModel`.

* :func:`attention_patterns` -> {layer: [B, H, Tq, Tk]} for one forward pass;
* :func:`attention_to` -> [L, H] mean attention from query positions to key positions (one pair per row);
* :func:`offset_scores` -> [L, H] mean attention from position i to i + offset (over all valid i):
  ``offset=-1`` is the previous-token score, ``offset=+1`` the next-token score (1 = a perfect head).

Inputs may live on the CPU; they are moved to the model's device in chunks of ``chunk`` rows
(results come back on the CPU), so long sequences and big batches fit in memory.
"""

from __future__ import annotations

from typing import Iterator

import torch

from dlmlab.analysis.requires import require_attention
from dlmlab.models.checks import check_range
from dlmlab.models.precision import upcast


def model_device(model) -> torch.device:
    """Device of the model's first parameter (CPU for a parameter-less module)."""
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def row_chunks(n: int, chunk: int) -> Iterator[slice]:
    for i in range(0, n, max(1, chunk)):
        yield slice(i, min(n, i + chunk))


@torch.no_grad()
def attention_patterns(model, tokens: torch.Tensor, **forward_kwargs) -> dict[int, torch.Tensor]:
    """tokens [B, T] -> {layer: pattern [B, H, T, T]} on the CPU (probabilities, rows sum to 1)."""
    require_attention(model, "attention_patterns", points=("pattern",))
    with model.cache("blocks.*.attn.pattern") as c:
        model(tokens.to(model_device(model)), **forward_kwargs)
    return {int(name.split(".")[1]): upcast(p).cpu() for name, p in c.items()}


@torch.no_grad()
def attention_to(model, tokens: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor, chunk: int = 64,
                 **forward_kwargs) -> torch.Tensor:
    """Mean attention weight from query ``q_pos[b]`` to key ``k_pos[b]`` in row b -> [L, H].

    tokens [B, T]; q_pos, k_pos [B] integer positions.
    """
    require_attention(model, "attention_to", points=("pattern",))
    B, T = tokens.shape
    q_pos, k_pos = torch.as_tensor(q_pos).long(), torch.as_tensor(k_pos).long()
    if q_pos.shape != (B,) or k_pos.shape != (B,):
        raise ValueError(f"q_pos and k_pos must have shape [{B}], got {tuple(q_pos.shape)}, {tuple(k_pos.shape)}")
    for name, p in (("q_pos", q_pos), ("k_pos", k_pos)):
        check_range(p, T, name, where="")
    total = 0.0
    for sl in row_chunks(B, chunk):
        pats = attention_patterns(model, tokens[sl], **forward_kwargs)
        rows = torch.arange(sl.stop - sl.start)
        total = total + torch.stack([pats[i][rows, :, q_pos[sl], k_pos[sl]].sum(0) for i in sorted(pats)])
    return total / B


@torch.no_grad()
def offset_scores(model, tokens: torch.Tensor, offset: int, chunk: int = 64, **forward_kwargs) -> torch.Tensor:
    """[L, H] mean attention from position i to i + offset over all i where both exist.

    ``offset=-1``: previous-token score; ``offset=+1``: next-token score.
    """
    T = tokens.shape[1]
    if offset == 0 or abs(offset) >= T:
        raise ValueError(f"offset must be non-zero and |offset| < seq len {T}, got {offset}")
    return diagonal_scores(model, tokens, offset, chunk=chunk, **forward_kwargs)


@torch.no_grad()
def diagonal_scores(model, tokens: torch.Tensor, offset: int, min_query: int = 0, chunk: int = 64,
                    **forward_kwargs) -> torch.Tensor:
    """[L, H] mean pattern[q, q + offset] over rows and queries q >= min_query where q + offset is valid."""
    require_attention(model, "diagonal_scores", points=("pattern",))
    total, n = 0.0, 0
    for sl in row_chunks(tokens.shape[0], chunk):
        pats = attention_patterns(model, tokens[sl], **forward_kwargs)
        q0 = max(0, -offset)  # first query with a valid key
        skip = max(0, min_query - q0)
        diags = [pats[i].diagonal(offset=offset, dim1=-2, dim2=-1)[..., skip:] for i in sorted(pats)]  # [b, H, n_q]
        total = total + torch.stack([d.sum(dim=(0, 2)) for d in diags])
        n += diags[0].shape[0] * diags[0].shape[2]
    return total / max(n, 1)


def previous_token_scores(model, tokens: torch.Tensor, **kw) -> torch.Tensor:
    """[L, H] attention to the previous position (TransformerLens "previous token head" score)."""
    return offset_scores(model, tokens, -1, **kw)


def next_token_scores(model, tokens: torch.Tensor, **kw) -> torch.Tensor:
    """[L, H] attention to the next position (only possible with a non-causal mask)."""
    return offset_scores(model, tokens, +1, **kw)


def local_offset_scores(model, tokens: torch.Tensor, radius: int = 2, **kw) -> dict[int, torch.Tensor]:
    """{offset: [L, H] :func:`offset_scores`} for every offset in +-1 .. +-``radius`` (the local context of a
    position); a head attends locally when one of them (or their sum) is large."""
    if radius < 1:
        raise ValueError(f"radius must be >= 1, got {radius}")
    return {o: offset_scores(model, tokens, o, **kw) for r in range(1, radius + 1) for o in (-r, r)}
