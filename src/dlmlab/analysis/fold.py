"""Folding LayerNorm / RMSNorm into the linear layers after it, two ways, each named for what it does.

A pre-norm sublayer reads ``y = N(x) W^T + c`` with ``N(x) = w * P x / sigma(x) + b``
(``P = I - 11^T/D`` centres for LayerNorm, ``P = I`` for RMSNorm, ``sigma`` the per-token scale).

:func:`fold_ln` (TransformerLens's ``fold_ln``: exact, normalisation kept)
    moves the norm's weight and bias into the next layers, ``W' = W diag(w)`` (reading weights
    centred for LayerNorm, as TransformerLens does), ``c' = c + W b``, and leaves the norm as pure
    normalisation ``P x / sigma(x)`` (weight 1, bias 0).  By default the writing weights (token /
    position embeddings, attention W_O, MLP out and their biases) are centred too when every
    reader of the residual stream is a LayerNorm (TransformerLens's ``center_writing_weights``).
    The folded model computes the same function: logits equal the original's to float round-off.

:func:`fold_ln_frozen_scale` (a linearisation)
    also freezes ``sigma(x)`` to a constant ``s`` (its mean over a reference batch,
    :func:`norm_scales`) and removes the norm: ``y = x (P diag(w) W^T)/s + (W b + c)``, so the model
    from the residual stream to every sublayer input is linear.  That is an approximation:
    :func:`freeze_norm_scales` gives the reference model with the frozen scale (the fold equals it
    to round-off) and :func:`fold_gap` measures both against the original.

Norm scales have one implementation, in :mod:`dlmlab.models.norm_scale`: :func:`norm_scale` (the
per-token ``sigma``, as the norm computes it) and :func:`scale_like_norm` (``w * P x / sigma`` for a
given sigma, used by :meth:`dlmlab.cache.ActivationCache.apply_ln_to_stack`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Iterator

import torch
from torch import nn

from dlmlab.analysis.heads import model_device
from dlmlab.errors import UserError
from dlmlab.models.norm_scale import FrozenScaleNorm, norm_params, norm_scale
from dlmlab.models.precision import upcast


class MissingScale(UserError, KeyError):
    """A norm with no frozen scale given."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


# -- where the norms are ---------------------------------------------------------------------------
def _norm_sites(model) -> Iterator[tuple[nn.Module, str, list[tuple[nn.Module, str]]]]:
    """(owner, norm attribute, [(module, attribute) of each linear layer reading the norm]) per norm.

    Transformer blocks: ``ln1`` -> W_q/W_k/W_v, ``ln2`` -> MLP fc_in (/fc_gate); pre-norm SSM blocks
    (Mamba, Mamba-2): ``norm`` -> ``mixer.in_proj``; the model: ``ln_final`` -> ``unembed``."""
    missing = [a for a in ("blocks", "ln_final", "unembed") if getattr(model, a, None) is None]
    if missing:
        raise UserError(f"norm folding / scales need a model with blocks, ln_final and unembed (a dlmlab "
                        f"Transformer, Mamba, Mamba-2, LSTM or GRU); this {type(model).__name__} has no "
                        f"{', '.join(missing)}")
    for block in model.blocks:
        if getattr(block, "attn", None) is not None and hasattr(block, "ln1"):
            yield block, "ln1", [(block.attn, n) for n in ("W_q", "W_k", "W_v")]
        if getattr(block, "mlp", None) is not None and hasattr(block, "ln2"):
            yield block, "ln2", [(block.mlp, n) for n in ("fc_in", "fc_gate") if hasattr(block.mlp, n)]
        mixer = getattr(block, "mixer", None)
        if isinstance(getattr(block, "norm", None), nn.Module) and isinstance(getattr(mixer, "in_proj", None),
                                                                               nn.Linear):
            yield block, "norm", [(mixer, "in_proj")]
    yield model, "ln_final", [(model, "unembed")]


def _site_name(model, owner, attr: str) -> str:
    if owner is model:
        return attr
    return f"blocks.{list(model.blocks).index(owner)}.{attr}"


@torch.no_grad()
def norm_scales(model, tokens: torch.Tensor, **forward_kwargs) -> dict[str, float]:
    """Mean per-token scale (:func:`norm_scale`) of each norm's input on ``tokens``, by norm name
    (``blocks.{i}.ln1|ln2|norm``, ``ln_final``); models without norms to fold raise a :class:`UserError`."""
    seen: dict[str, float] = {}
    handles = []
    for owner, attr, _ in _norm_sites(model):
        norm = getattr(owner, attr)
        if isinstance(norm, nn.Identity):
            continue
        norm_params(norm)  # a clear error for an unsupported norm, before the forward
        key = _site_name(model, owner, attr)

        def hook(mod, inp, out, key=key):
            seen[key] = float(norm_scale(mod, inp[0]).mean())

        handles.append(norm.register_forward_hook(hook))
    try:
        model(tokens.to(model_device(model)), **forward_kwargs)
    finally:
        for h in handles:
            h.remove()
    return seen


def _untie_unembed(model) -> None:
    """Give ``model.unembed`` its own weight when it shares the token embedding's."""
    un = model.unembed
    if getattr(un, "weight", None) is getattr(getattr(model, "tok_emb", None), "weight", None):
        new = nn.Linear(un.in_features, un.out_features, bias=un.bias is not None, dtype=un.weight.dtype,
                        device=un.weight.device)
        new.weight = nn.Parameter(un.weight.detach().clone())
        if un.bias is not None:
            new.bias = nn.Parameter(un.bias.detach().clone())
        model.unembed = new


def _with_bias(lin: nn.Linear) -> nn.Linear:
    if lin.bias is not None:
        return lin
    new = nn.Linear(lin.in_features, lin.out_features, bias=True, dtype=lin.weight.dtype, device=lin.weight.device)
    new.weight = nn.Parameter(lin.weight.detach().clone())
    nn.init.zeros_(new.bias)
    return new


def _replace_cfg(model, **fields) -> None:
    cfg = getattr(model, "cfg", None)
    if cfg is not None and dataclasses.is_dataclass(cfg):
        names = {f.name for f in dataclasses.fields(cfg)}
        model.cfg = dataclasses.replace(cfg, **{k: v for k, v in fields.items() if k in names})


# -- TransformerLens's exact fold ------------------------------------------------------------------
@torch.no_grad()
def fold_ln(model, center_writing_weights: bool = True, center_unembed: bool = False) -> nn.Module:
    """Copy of ``model`` with each norm's weight and bias folded into the linear layers reading it and
    the norm left as pure normalisation (weight 1, bias 0): the same function, exactly.

    LayerNorm: the reading weights are centred (their mean over the input is removed, which the
    centred norm output cannot see).  ``center_writing_weights`` (LayerNorm models whose every
    residual reader is a LayerNorm, i.e. Transformers): the mean over d_model of every write to the
    residual stream (token / position embeddings, W_O and MLP fc_out with their biases) is removed
    too; the residual-stream activations then change by a per-token multiple of the all-ones vector
    and nothing downstream does.  ``center_unembed``: the unembedding's mean over the vocabulary
    is removed (logits shift by a per-token constant; log-probabilities unchanged).
    The unembedding is untied from the token embedding and biases are added where the fold needs
    them (``cfg.bias`` / ``cfg.tie_embeddings`` of the copy updated)."""
    list(_norm_sites(model))  # a clear error for a model without the norms (before copying it)
    folded = copy.deepcopy(model)
    _untie_unembed(folded)
    sites = list(_norm_sites(folded))
    norms = [getattr(o, a) for o, a, _ in sites]
    added_bias = False
    for owner, attr, readers in sites:
        norm = getattr(owner, attr)
        if isinstance(norm, nn.Identity):
            continue
        if isinstance(norm, FrozenScaleNorm):
            raise UserError("fold_ln needs the original norms; this model's norms have frozen scales")
        w, b, center, _ = norm_params(norm)
        for lin_owner, lin_attr in readers:
            lin = getattr(lin_owner, lin_attr)
            if b is not None and lin.bias is None:
                lin, added_bias = _with_bias(lin), True
            W = lin.weight.data  # [out, D]
            if b is not None:
                lin.bias.data += W @ b.to(W.dtype)
            W_new = W * w.to(W.dtype)[None, :] if w is not None else W.clone()
            if center:
                W_new -= W_new.mean(-1, keepdim=True)
            lin.weight.data = W_new
            setattr(lin_owner, lin_attr, lin)
        if w is not None:
            norm.weight.data.fill_(1.0)
        if b is not None:
            norm.bias.data.zero_()
    all_layer_norm = bool(norms) and all(isinstance(n, nn.LayerNorm) for n in norms)
    if center_writing_weights and all_layer_norm and hasattr(folded.blocks[0], "attn"):
        _center_writing_weights(folded)
    if center_unembed:
        un = folded.unembed
        un.weight.data -= un.weight.data.mean(0, keepdim=True)
        if un.bias is not None:
            un.bias.data -= un.bias.data.mean()
    fields = {"tie_embeddings": False}
    if added_bias:
        fields["bias"] = True
    _replace_cfg(folded, **fields)
    return folded


def _center_writing_weights(model) -> None:
    """Remove the d_model mean of every write to the residual stream (embeddings, W_O, MLP fc_out)."""
    for emb in (getattr(model, "tok_emb", None), getattr(model, "pos_emb", None)):
        if emb is not None:
            emb.weight.data -= emb.weight.data.mean(-1, keepdim=True)
    for block in model.blocks:
        writers = [block.attn.W_o] + ([block.mlp.fc_out] if getattr(block, "mlp", None) is not None else [])
        for lin in writers:  # weight [D, in]: centre each column over D
            lin.weight.data -= lin.weight.data.mean(0, keepdim=True)
            if lin.bias is not None:
                lin.bias.data -= lin.bias.data.mean()


# -- the frozen-scale linearisation ------------------------------------------------------------------
def freeze_norm_scales(model, scales: dict[str, float]) -> nn.Module:
    """Copy of ``model`` whose norms divide by the constant ``scales[name]`` instead of the per-token scale."""
    frozen = copy.deepcopy(model)
    for owner, attr, _ in list(_norm_sites(frozen)):
        norm = getattr(owner, attr)
        if isinstance(norm, nn.Identity):
            continue
        name = _site_name(frozen, owner, attr)
        if name not in scales:
            raise MissingScale(f"no frozen scale for norm {name!r}; compute them with norm_scales(model, tokens)")
        w, b, center, _ = norm_params(norm)
        if w is None:
            w = torch.ones(norm.normalized_shape[-1])
        setattr(owner, attr, FrozenScaleNorm(w, b, scales[name], center))
    return frozen


@torch.no_grad()
def fold_ln_frozen_scale(model, scales: dict[str, float]) -> nn.Module:
    """Copy of ``model`` *linearised by freezing each norm's scale* to ``scales[name]``
    (:func:`norm_scales`), the norm then folded into the linear layers after it and replaced by identity.

    Not the same function as the original: the per-token scale becomes a constant (see
    :func:`fold_gap`; :func:`fold_ln` is the exact fold).  The unembedding is untied from the token
    embedding and gets a bias; ``cfg.norm`` of the copy becomes "none" and ``cfg.bias`` True."""
    list(_norm_sites(model))  # a clear error for a model without the norms (before copying it)
    folded = copy.deepcopy(model)
    _untie_unembed(folded)
    for owner, attr, readers in list(_norm_sites(folded)):
        norm = getattr(owner, attr)
        if isinstance(norm, nn.Identity):
            continue
        name = _site_name(folded, owner, attr)
        if name not in scales:
            raise MissingScale(f"no frozen scale for norm {name!r}; compute them with norm_scales(model, tokens)")
        w, b, center, _ = norm_params(norm)
        D = norm.normalized_shape[-1] if w is None else w.shape[0]
        if w is None:
            w = torch.ones(D)
        eye = torch.eye(D, dtype=w.dtype, device=w.device)
        P = eye - 1.0 / D if center else eye
        fold_t = (w[:, None] * P) / scales[name]  # (P diag(w) / s)^T: x -> x P diag(w) / s, so W' = W fold_t
        for lin_owner, lin_attr in readers:
            lin = _with_bias(getattr(lin_owner, lin_attr))
            W = lin.weight.data.clone()  # [out, D]
            if b is not None:
                lin.bias.data += W @ b
            lin.weight.data = W @ fold_t.to(W.dtype)
            setattr(lin_owner, lin_attr, lin)
        setattr(owner, attr, nn.Identity())
    _replace_cfg(folded, norm="none", bias=True, tie_embeddings=False)
    return folded


@torch.no_grad()
def fold_gap(model, folded, tokens: torch.Tensor, **forward_kwargs) -> dict[str, float]:
    """How far the folded model is from the original on ``tokens``: max |logit diff| and mean KL (nats)."""
    x = tokens.to(model_device(model))
    a, b = upcast(model(x, **forward_kwargs)), upcast(folded(x, **forward_kwargs))
    la, lb = a.log_softmax(-1), b.log_softmax(-1)
    kl = (la.exp() * (la - lb)).sum(-1).mean()
    agree = (a.argmax(-1) == b.argmax(-1)).float().mean()
    return {"max_abs_logit_diff": float((a - b).abs().max()), "mean_kl": float(kl), "argmax_agreement": float(agree)}
