"""Attention-pattern head scores: how much each head attends to a chosen key position.

Works on any toolkit model exposing ``blocks.{i}.attn.pattern`` [B, H, Tq, Tk] hook points.

* :func:`attention_patterns` -> {layer: [B, H, Tq, Tk]} for one forward pass;
* :func:`attention_to` -> [L, H] mean attention from query positions to key positions (one pair per row);
* :func:`offset_scores` -> [L, H] mean attention from position i to i + offset (over all valid i):
  ``offset=-1`` is the previous-token score, ``offset=+1`` the next-token score (1 = a perfect head).
"""

from __future__ import annotations

import torch


@torch.no_grad()
def attention_patterns(model, tokens: torch.Tensor, **forward_kwargs) -> dict[int, torch.Tensor]:
    """tokens [B, T] -> {layer: pattern [B, H, T, T]} (probabilities, rows sum to 1)."""
    with model.cache("blocks.*.attn.pattern") as c:
        model(tokens, **forward_kwargs)
    return {int(name.split(".")[1]): p for name, p in c.items()}


@torch.no_grad()
def attention_to(model, tokens: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor, **forward_kwargs) -> torch.Tensor:
    """Mean attention weight from query ``q_pos[b]`` to key ``k_pos[b]`` in row b -> [L, H].

    tokens [B, T]; q_pos, k_pos [B] integer positions.
    """
    B, T = tokens.shape
    q_pos, k_pos = torch.as_tensor(q_pos).long(), torch.as_tensor(k_pos).long()
    if q_pos.shape != (B,) or k_pos.shape != (B,):
        raise ValueError(f"q_pos and k_pos must have shape [{B}], got {tuple(q_pos.shape)}, {tuple(k_pos.shape)}")
    for name, p in (("q_pos", q_pos), ("k_pos", k_pos)):
        if B and (int(p.min()) < 0 or int(p.max()) >= T):
            raise ValueError(f"{name} out of range [0, {T})")
    pats = attention_patterns(model, tokens, **forward_kwargs)
    rows = torch.arange(B)
    return torch.stack([pats[i][rows, :, q_pos, k_pos].mean(0) for i in sorted(pats)])


@torch.no_grad()
def offset_scores(model, tokens: torch.Tensor, offset: int, **forward_kwargs) -> torch.Tensor:
    """[L, H] mean attention from position i to i + offset over all i where both exist.

    ``offset=-1``: previous-token score; ``offset=+1``: next-token score.
    """
    T = tokens.shape[1]
    if offset == 0 or abs(offset) >= T:
        raise ValueError(f"offset must be non-zero and |offset| < seq len {T}, got {offset}")
    pats = attention_patterns(model, tokens, **forward_kwargs)
    out = []
    for i in sorted(pats):
        diag = pats[i].diagonal(offset=offset, dim1=-2, dim2=-1)  # [B, H, T - |offset|]
        out.append(diag.mean(dim=(0, 2)))
    return torch.stack(out)


def previous_token_scores(model, tokens: torch.Tensor, **kw) -> torch.Tensor:
    """[L, H] attention to the previous position (TransformerLens "previous token head" score)."""
    return offset_scores(model, tokens, -1, **kw)


def next_token_scores(model, tokens: torch.Tensor, **kw) -> torch.Tensor:
    """[L, H] attention to the next position (only possible with a non-causal mask)."""
    return offset_scores(model, tokens, +1, **kw)
