"""Alignment of forward-loss and reverse-loss gradients.

Storage-column gradient (:func:`storage_gradient_cosine`).  Through one attention layer the logits
at a query position depend on the storage column ``Y_h[:, b]`` (what source token b writes into the
output vocabulary via head h, :func:`~dlmlab.studies.reversal.storage_routing.storage_matrix`) as
``logits += sum_{j: x_j = b} alpha_h[i, j] / s_i * Y_h[:, b]`` (``s_i`` the final-norm scale), so the
gradient of the cross-entropy of target ``a`` with respect to that column is::

    g_h = (sum_{j: x_j = b} alpha_h[i, j] / s_i) * (p_i - e_a)        (a vector over the vocabulary)

:func:`storage_gradient_cosine` returns, per fact, the cosine between the forward query's and the
reverse query's gradient on the reverse evidence column ``Y[:, B]`` (all heads concatenated).  It is
0 when the forward query never reads b (an AR model trained on "A is B" never has B in context).

Parameter gradient (:func:`parameter_gradient_cosine`): cosine between the full gradients of the
forward and the reverse loss over chosen parameters (autograd); it runs on any model family.  The
storage-column gradients and the default modules of :func:`per_query_gradient_cosine` need a toolkit
Transformer (otherwise :class:`~dlmlab.analysis.requires.UnsupportedModel`).
"""

from __future__ import annotations

import torch

from dlmlab.analysis.requires import require_attention, require_layer
from dlmlab.studies.reversal.queries import query_loss
from dlmlab.studies.reversal.storage_routing import StorageRouting, storage_routing
from dlmlab.tasks.relations import Queries

ANALYSIS_MODULE = True  # refusals name this module's public functions (analysis.requires.public_name)


def storage_column_gradient(model, q: Queries, source: torch.Tensor, layer: int = 0,
                            exclude: tuple[int, ...] = (), sr: StorageRouting | None = None) -> torch.Tensor:
    """Gradient [N, H, V] of each query's NLL with respect to the storage column ``Y_h[:, source_n]``.

    ``sr``: the queries' :func:`~dlmlab.studies.reversal.storage_routing.storage_routing` split (with the same ``layer``
    and ``exclude``, no ``contrast``), when already computed; otherwise it is computed here."""
    sr = storage_routing(model, q, layer, exclude) if sr is None else sr
    reads = (q.tokens == source[:, None]).to(sr.alpha.dtype)  # [N,T]
    coef = (sr.alpha * reads[:, None]).sum(-1) / sr.scale[:, None]  # [N,H]
    resid = sr.probs.clone()
    resid[torch.arange(len(q), device=resid.device), q.target] -= 1.0  # p - e_a  [N,V]
    return coef[:, :, None] * resid[:, None, :]


def storage_gradient_cosine(model, fwd: Queries, rev: Queries, layer: int = 0, exclude: tuple[int, ...] = (),
                            splits: tuple[StorageRouting, StorageRouting] | None = None) -> torch.Tensor:
    """Per-fact cosine [N] of forward and reverse NLL gradients on the reverse evidence column Y[:, B]
    (B = ``rev.source``); 0 where the forward query does not read B.  ``splits``: the (forward, reverse)
    storage-routing splits of the two query sets, when already computed (see :func:`storage_column_gradient`)."""
    if len(fwd) != len(rev):
        raise ValueError(f"forward ({len(fwd)}) and reverse ({len(rev)}) queries must pair up one to one")
    b = rev.source
    sf, sr = splits if splits is not None else (None, None)
    gf = storage_column_gradient(model, fwd, b, layer, exclude, sf).flatten(1)
    gr = storage_column_gradient(model, rev, b, layer, exclude, sr).flatten(1)
    den = gf.norm(dim=1) * gr.norm(dim=1)
    return torch.where(den > 0, (gf * gr).sum(1) / den.clamp(min=1e-30), torch.zeros_like(den))


def parameter_gradient_cosine(model, fwd: Queries, rev: Queries, params: dict[str, torch.nn.Parameter] | None = None,
                              exclude: tuple[int, ...] = ()) -> float:
    """Cosine between d(forward NLL)/d(theta) and d(reverse NLL)/d(theta) over ``params``
    (default: every trainable parameter).  Runs its own autograd, also under ``torch.no_grad``."""
    params = params if params is not None else {n: p for n, p in model.named_parameters() if p.requires_grad}
    plist = list(params.values())
    was_training = model.training
    model.eval()
    with torch.enable_grad():
        gf = torch.autograd.grad(query_loss(model, fwd, exclude), plist, allow_unused=True)
        gr = torch.autograd.grad(query_loss(model, rev, exclude), plist, allow_unused=True)
    if was_training:
        model.train()
    flat = lambda gs: torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(gs, plist)])  # noqa: E731
    a, b = flat(gf), flat(gr)
    den = a.norm() * b.norm()
    return float((a @ b) / den) if den > 0 else 0.0


def storage_modules(model, layer: int = 0) -> dict[str, torch.nn.Linear]:
    """The storage (value / output) projections of attention ``layer``: ``W_v`` and ``W_o`` (nn.Linear)."""
    require_attention(model, "storage_modules")
    require_layer(model, layer, "storage_modules")
    attn = model.blocks[layer].attn
    return {f"blocks.{layer}.attn.W_v": attn.W_v, f"blocks.{layer}.attn.W_o": attn.W_o}


def per_query_gradients(model, q: Queries, modules: dict[str, torch.nn.Linear],
                        exclude: tuple[int, ...] = ()) -> torch.Tensor:
    """Autograd gradient [N, P] of each query's own NLL with respect to the weights and biases of the linear
    ``modules`` (flattened: weight then bias, modules in order).

    One batched pass: the summed NLL is differentiated (autograd) with respect to each module's output
    [N, T, out]; since queries do not interact, row n of that gradient is query n's alone, and the per-query
    parameter gradient of ``y = x W^T + b`` is ``sum_t g[n, t]^T x[n, t]`` (weight) and ``sum_t g[n, t]``."""
    for name, m in modules.items():
        if not isinstance(m, torch.nn.Linear):
            raise TypeError(f"{name} is {type(m).__name__}, expected nn.Linear")
    ins, outs = {}, {}

    def keep(name):
        def hook(mod, args, out):
            ins[name], outs[name] = args[0], out
        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in modules.items()]
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            logits = model(q.tokens)
            at = logits[torch.arange(len(q), device=logits.device), q.query_pos].float()
            if exclude:
                at = at.clone()
                at[:, list(exclude)] = float("-inf")
            loss = -at.log_softmax(-1).gather(1, q.target[:, None]).sum()
            gouts = torch.autograd.grad(loss, [outs[n] for n in modules])
    finally:
        for h in handles:
            h.remove()
        if was_training:
            model.train()
    parts = []
    for (name, m), g in zip(modules.items(), gouts):
        x = ins[name].detach()
        parts.append(torch.einsum("nto,nti->noi", g, x).flatten(1))
        if m.bias is not None:
            parts.append(g.sum(1))
    return torch.cat(parts, 1)


def per_query_gradient_cosine(model, fwd: Queries, rev: Queries, modules: dict[str, torch.nn.Linear] | None = None,
                              exclude: tuple[int, ...] = ()) -> torch.Tensor:
    """Per-fact cosine [N] between the autograd gradients of the forward query's and the reverse query's NLL on
    ``modules`` (default: the storage projections W_v, W_o of layer 0); 0 where a gradient vanishes."""
    if len(fwd) != len(rev):
        raise ValueError(f"forward ({len(fwd)}) and reverse ({len(rev)}) queries must pair up one to one")
    modules = modules if modules is not None else storage_modules(model)
    gf = per_query_gradients(model, fwd, modules, exclude)
    gr = per_query_gradients(model, rev, modules, exclude)
    den = gf.norm(dim=1) * gr.norm(dim=1)
    return torch.where(den > 0, (gf * gr).sum(1) / den.clamp(min=1e-30), torch.zeros_like(den))
