"""Storage-routing decomposition of a target logit through one attention layer.

For a query at position ``i`` (e.g. the mask of "[M] is B") and a target token ``a`` (A),
the logit of ``a`` splits exactly into per-(head h, key position j) terms plus a rest::

    logit_a(i) = sum_h sum_j  alpha_h[i, j] * S_h[a, j]  +  rest

* ``alpha_h[i, j]``: the routing weight (attention probability of head h from i to j);
* ``S_h[a, j] = W_U[a] . N_i(W_O^h v_h(j))``: the value-side evidence that key j carries for
  ``a`` through head h (``N_i`` = the final norm linearised at the query's own scale);
* ``rest``: direct path, biases and every other layer / MLP (logit minus the routed terms).

With RoPE or ALiBi the value side carries no position, so for a one-layer attention-only model
``S_h[a, j]`` depends only on the token at j: the *shared storage* ``Y_h[a, b]``
(:func:`storage_matrix`), read out in the forward query ("[M] is B") and in the reverse query
("B is [M]") alike; only the routing ``alpha`` differs.  With learned absolute positions the value
also holds ``W_V P_j``, which :func:`storage_matrix` leaves out (it is the position-invariant part).

The final norm is linearised with the scale of the actual run (exact for that forward pass):
LayerNorm ``x -> w * (x - mean x) / s_i`` (+ bias, counted in ``rest``), RMSNorm ``x -> w * x / rms_i``.

Needs a toolkit Transformer (it recomputes scores and OV paths from the model's weights and config);
any other model raises :class:`~dlmlab.analysis.requires.UnsupportedModel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlmlab.analysis.requires import require_layer, require_transformer
from dlmlab.models.masks import build_mask
from dlmlab.models.norm_scale import norm_scale, scale_like_norm
from dlmlab.models.positions import apply_rope, rope_cos_sin
from dlmlab.models.precision import upcast
from dlmlab.tasks.relations import Queries

ANALYSIS_MODULE = True  # refusals name this module's public functions (analysis.requires.public_name)


def _check_layer(model, layer: int, analysis: str, points: tuple[str, ...] = (), weights: bool = False) -> None:
    require_transformer(model, analysis, points, weights)
    require_layer(model, layer, analysis)


def attention_scores(model, tokens: torch.Tensor, layer: int = 0, attn_mask: str | None = None,
                     prompt_len=None) -> torch.Tensor:
    """Pre-softmax attention scores [B, H, T, T] of ``layer`` (RoPE applied, ALiBi bias added, masked
    entries -inf), so that ``softmax(scores, -1)`` is the model's attention pattern."""
    _check_layer(model, layer, "attention_scores", ("q", "k"))
    names = [f"blocks.{layer}.attn.q", f"blocks.{layer}.attn.k"]
    with torch.no_grad(), model.cache(names) as c:
        model(tokens, attn_mask=attn_mask, prompt_len=prompt_len)
    q = upcast(c[names[0]].transpose(1, 2))  # [B,H,T,dh]
    k = upcast(c[names[1]].transpose(1, 2))
    T = tokens.shape[1]
    pos = torch.arange(T, device=tokens.device)
    cfg = model.cfg
    if cfg.positions == "rope":
        cos, sin = rope_cos_sin(pos, cfg.d_head, cfg.rope_theta, q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    scores = (q @ k.transpose(-1, -2)) * model.blocks[layer].attn.scale
    kind = attn_mask or cfg.attn_mask
    bias, _ = model.attention_bias(kind, pos, pos, prompt_len, scores.dtype)
    if bias is not None:
        scores = scores + bias
    else:
        allowed = build_mask(kind, pos, pos, prompt_len)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
    return scores


def _final_linear(model, resid: torch.Tensor):
    """The final norm as a linear map frozen at the scale of ``resid`` [N, D]: fn(c [N, ..., D]) -> [N, ..., D]."""
    ln = model.ln_final
    s = norm_scale(ln, resid)  # [N]
    return lambda c: scale_like_norm(ln, c, s.view((c.shape[0],) + (1,) * (c.dim() - 2)))


def final_norm_scale(model, resid: torch.Tensor) -> torch.Tensor:
    """Per-row scale [N] the final norm divides by (1 for no norm)."""
    return norm_scale(model.ln_final, resid)


@dataclass
class StorageRouting:
    """Decomposition of ``logit`` [N] (or the margin, with ``contrast``) = ``routed.sum((1, 2)) + rest``.

    alpha [N, H, T]: routing weights from each query position to every key position;
    storage [N, H, T]: value-side evidence each key position carries for the target;
    routed [N, H, T] = alpha * storage; rest [N]; evidence_alpha / evidence_storage [N, H]: at the
    evidence position; scale [N]: the final-norm scale at the query (for gradient analyses);
    probs [N, V]: the model's output distribution at the query.
    """

    logit: torch.Tensor
    alpha: torch.Tensor
    storage: torch.Tensor
    routed: torch.Tensor
    rest: torch.Tensor
    evidence_alpha: torch.Tensor
    evidence_storage: torch.Tensor
    scale: torch.Tensor
    probs: torch.Tensor


@torch.no_grad()
def storage_routing(model, q: Queries, layer: int = 0, exclude: tuple[int, ...] = (),
                    contrast: torch.Tensor | None = None, **forward_kwargs) -> StorageRouting:
    """Decompose the logit of ``q.target`` at ``q.query_pos`` through the heads of ``layer`` (any toolkit
    Transformer; exact for the run, see the module docstring).  ``exclude`` ids are dropped from ``probs``.

    ``contrast`` [C] token ids: decompose the logit *margin* ``logit[target] - mean_c logit[c]`` instead
    (storage then measures how much key j favours the target over the contrast set, e.g. all entities of
    the target's type), which removes evidence shared by every candidate.
    """
    _check_layer(model, layer, "storage_routing", ("pattern", "v"), weights=True)
    last = len(model.blocks) - 1
    names = [f"blocks.{layer}.attn.pattern", f"blocks.{layer}.attn.v", f"blocks.{last}.resid_post"]
    with model.cache(names) as c:
        logits = model(q.tokens, **forward_kwargs)
    N = len(q)
    rows = torch.arange(N, device=q.tokens.device)
    pattern = c[names[0]]  # [N,H,T,T]
    v = c[names[1]]  # [N,T,H,dh]
    resid = c[names[2]][rows, q.query_pos]  # [N,D]
    W_O = model.blocks[layer].attn.head_weights()["W_O"]  # [H,dh,D]
    head_vec = torch.einsum("nthd,hdm->nhtm", v, W_O)  # [N,H,T,D]
    lin = _final_linear(model, resid)(head_vec)
    W_U = model.unembed.weight[q.target]  # [N,D]
    logit = logits[rows, q.query_pos, q.target]
    if contrast is not None:
        W_U = W_U - model.unembed.weight[contrast].mean(0)
        logit = logit - logits[rows, q.query_pos][:, contrast].mean(1)
    storage = torch.einsum("nhtm,nm->nht", lin, W_U)
    alpha = pattern[rows, :, q.query_pos]  # [N,H,T]
    routed = alpha * storage
    at = upcast(logits[rows, q.query_pos])
    if exclude:
        at[:, list(exclude)] = float("-inf")
    return StorageRouting(
        logit=logit, alpha=alpha, storage=storage, routed=routed, rest=logit - routed.sum((1, 2)),
        evidence_alpha=alpha[rows, :, q.evidence_pos], evidence_storage=storage[rows, :, q.evidence_pos],
        scale=final_norm_scale(model, resid), probs=at.softmax(-1),
    )


@torch.no_grad()
def storage_matrix(model, sources: torch.Tensor, targets: torch.Tensor | None = None, layer: int = 0) -> torch.Tensor:
    """Position-invariant storage Y [H, n_targets, n_sources] of ``layer``:
    ``Y_h[a, b] = W_U[a] . w * center(W_O^h (W_V^h norm1(E_b) + b_V^h))``.

    The token-only OV circuit from source token b to target logit a, with the final norm's gain and
    centring but not its per-query scale (a positive factor, see :func:`final_norm_scale`).
    ``targets`` default: the whole output vocabulary.
    """
    _check_layer(model, layer, "storage_matrix", weights=True)
    blk = model.blocks[layer]
    x = blk.ln1(model.tok_emb.weight[sources.to(model.tok_emb.weight.device)])  # [S,D]
    hw = blk.attn.head_weights()
    v = torch.einsum("sd,hde->hse", x, hw["W_V"]) + hw["b_V"][:, None]  # [H,S,dh]
    out = torch.einsum("hse,hem->hsm", v, hw["W_O"])  # [H,S,D]
    out = scale_like_norm(model.ln_final, out, out.new_ones(out.shape[:-1]))  # gain and centring, scale 1
    W_U = model.unembed.weight if targets is None else model.unembed.weight[targets.to(out.device)]  # [A,D]
    return torch.einsum("hsm,am->has", out, W_U)


def storage_margin(Y: torch.Tensor, pairs_target: torch.Tensor) -> torch.Tensor:
    """How strongly storage singles out the true partner: for Y [H, n_targets, n_sources] summed over heads,
    margin[k] = Y[pairs_target[k], k] - mean_a Y[a, k] over the targets -> [n_sources]."""
    Ys = Y.sum(0)
    idx = torch.arange(Ys.shape[1], device=Ys.device)
    return Ys[pairs_target, idx] - Ys.mean(0)
