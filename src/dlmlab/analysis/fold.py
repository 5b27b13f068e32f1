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

    ``norm_scales(model, tokens, per_position=True)`` freezes one scale *per position* instead
    (``s_t``, the mean over the reference rows at position t): the usual linearisation when the
    residual norm grows along the sequence (a causal model's early positions, a DLM's masked ones).
    The reading weights then get the mean scale ``s = mean_t s_t`` exactly as above and the norm is
    replaced by :class:`PositionScale`, which multiplies position t by ``s / s_t`` (a fixed diagonal
    map per position, so every sublayer input is still linear in the residual stream).  A single
    constant loses most of a trained model's accuracy (the issue-27 measurements in
    docs/induction.md); per position it keeps it far better.  Weight-based analyses (composition
    scores, which are ratios of norms) do not depend on which scale is frozen: they read the same
    folded weights up to a scalar.

Norm scales have one implementation, in :mod:`dlmlab.models.norm_scale`: :func:`norm_scale` (the
per-token ``sigma``, as the norm computes it) and :func:`scale_like_norm` (``w * P x / sigma`` for a
given sigma, used by :meth:`dlmlab.interp.activation_cache.ActivationCache.apply_ln_to_stack`).
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


TOKEN_CLASS = "_token_class"  # key of norm_scales' dict: the token id whose positions get their own scales


class _PerPosition(nn.Module):
    """A table [T] (per position) or [2, T] (row 1 at positions holding the token ``class_id``, row 0 elsewhere),
    looked up for an input [B, T, D]; the token class of the current input is set by :func:`_track_token_class`."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("table", table.detach().clone())
        self.is_class: torch.Tensor | None = None  # [B, T] bool, set before each forward

    def lookup(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, 1] (or [T, 1]) values for the positions of x."""
        T = x.shape[-2]
        if T > self.table.shape[-1]:
            raise UserError(f"the frozen per-position norm scales cover {self.table.shape[-1]} positions; "
                            f"this input has {T}")
        if self.table.ndim == 1:
            return self.table[:T, None].to(x.dtype)
        if self.is_class is None or self.is_class.shape[-1] != T:
            raise UserError("per-token-class frozen scales need the model's input tokens (call the model itself)")
        t = torch.where(self.is_class, self.table[1, :T], self.table[0, :T])
        return t[..., None].to(x.dtype)


class PositionScale(_PerPosition):
    """``x * factor[t]`` at position t (``factor`` [T], or [2, T] by token class): a frozen per-position norm scale
    relative to the one folded into the weights."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.lookup(x)


class PositionFrozenNorm(_PerPosition):
    """The reference of a per-position frozen scale: ``w * P x / s[t] + b`` (``s`` [T] or [2, T])."""

    def __init__(self, norm: nn.Module, scale: torch.Tensor) -> None:
        super().__init__(scale)
        w, b, center, _ = norm_params(norm)
        self.register_buffer("weight", None if w is None else w.detach().clone())
        self.register_buffer("bias", None if b is None else b.detach().clone())
        self.center = center

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.center:
            x = x - x.mean(-1, keepdim=True)
        y = x / self.lookup(x)
        if self.weight is not None:
            y = y * self.weight
        return y + self.bias if self.bias is not None else y


def _track_token_class(model: nn.Module, class_id: int) -> None:
    """Before each forward of ``model`` tell its per-position scale tables which positions hold ``class_id``."""
    tables = [m for m in model.modules() if isinstance(m, _PerPosition) and m.table.ndim == 2]

    def pre(mod, args, kwargs):
        tokens = args[0] if args else kwargs.get("tokens")
        for t in tables:
            t.is_class = tokens == class_id

    if tables:
        model.register_forward_pre_hook(pre, with_kwargs=True)


@torch.no_grad()
def norm_scales(model, tokens: torch.Tensor, per_position: bool = False, token_class: int | None = None,
                **forward_kwargs) -> dict:
    """Mean per-token scale (:func:`norm_scale`) of each norm's input on ``tokens`` [B, T], by norm name
    (``blocks.{i}.ln1|ln2|norm``, ``ln_final``): a float, or with ``per_position`` a tensor [T] (the mean over
    the rows at each position), or with ``token_class`` (e.g. a DLM's mask id; needs ``per_position``) a tensor
    [2, T]: row 1 the mean at positions holding that token, row 0 elsewhere (a position never holding it: row
    0's value); the dict then also holds ``TOKEN_CLASS: token_class``.  Models without norms to fold raise a
    :class:`UserError`."""
    if token_class is not None and not per_position:
        raise ValueError("token_class scales are per position: pass per_position=True")
    seen: dict = {} if token_class is None else {TOKEN_CLASS: int(token_class)}
    is_class = None if token_class is None else (tokens == token_class).cpu()
    handles = []
    for owner, attr, _ in _norm_sites(model):
        norm = getattr(owner, attr)
        if isinstance(norm, nn.Identity):
            continue
        norm_params(norm)  # a clear error for an unsupported norm, before the forward
        key = _site_name(model, owner, attr)

        def hook(mod, inp, out, key=key):
            sig = norm_scale(mod, inp[0]).cpu()  # [B, T]
            if is_class is None:
                seen[key] = sig.mean(0) if per_position else float(sig.mean())
                return
            n1 = is_class.sum(0)
            other = (sig * ~is_class).sum(0) / (~is_class).sum(0).clamp(min=1)
            cls = torch.where(n1 > 0, (sig * is_class).sum(0) / n1.clamp(min=1), other)
            seen[key] = torch.stack([other, cls])

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
def freeze_norm_scales(model, scales: dict) -> nn.Module:
    """Copy of ``model`` whose norms divide by the constant ``scales[name]`` (a float, or [T] per position:
    :class:`PositionFrozenNorm`) instead of the per-token scale."""
    frozen = copy.deepcopy(model)
    for owner, attr, _ in list(_norm_sites(frozen)):
        norm = getattr(owner, attr)
        if isinstance(norm, nn.Identity):
            continue
        name = _site_name(frozen, owner, attr)
        if name not in scales:
            raise MissingScale(f"no frozen scale for norm {name!r}; compute them with norm_scales(model, tokens)")
        if torch.is_tensor(scales[name]) and scales[name].ndim >= 1:
            setattr(owner, attr, PositionFrozenNorm(norm, scales[name].to(_param_of(norm))))
            continue
        w, b, center, _ = norm_params(norm)
        if w is None:
            w = torch.ones(norm.normalized_shape[-1])
        setattr(owner, attr, FrozenScaleNorm(w, b, float(scales[name]), center))
    if TOKEN_CLASS in scales:
        _track_token_class(frozen, scales[TOKEN_CLASS])
    return frozen


def _param_of(norm: nn.Module) -> torch.Tensor:
    """A tensor with the norm's dtype and device (for buffers built beside it)."""
    return next(iter(norm.parameters()), torch.zeros(()))


def _split_scale(scale) -> tuple[float, torch.Tensor | None]:
    """A frozen scale -> (the constant folded into the weights: the mean of a table, per-position factors
    s / s_t (same shape as the table) or None)."""
    if torch.is_tensor(scale) and scale.ndim >= 1:
        s = scale.double()
        mean = float(s.mean())
        return mean, (mean / s)
    return float(scale), None


@torch.no_grad()
def fold_ln_frozen_scale(model, scales: dict) -> nn.Module:
    """Copy of ``model`` *linearised by freezing each norm's scale* to ``scales[name]``
    (:func:`norm_scales`), the norm then folded into the linear layers after it and replaced by identity
    (per-position scales [T]: by :class:`PositionScale`, the factor s_mean / s_t at position t).

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
        s, per_pos = _split_scale(scales[name])
        fold_t = (w[:, None] * P) / s  # (P diag(w) / s)^T: x -> x P diag(w) / s, so W' = W fold_t
        for lin_owner, lin_attr in readers:
            lin = _with_bias(getattr(lin_owner, lin_attr))
            W = lin.weight.data.clone()  # [out, D]
            if b is not None:
                lin.bias.data += W @ b
            lin.weight.data = W @ fold_t.to(W.dtype)
            setattr(lin_owner, lin_attr, lin)
        setattr(owner, attr, nn.Identity() if per_pos is None else PositionScale(per_pos.to(w.dtype).to(w.device)))
    if TOKEN_CLASS in scales:
        _track_token_class(folded, scales[TOKEN_CLASS])
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
