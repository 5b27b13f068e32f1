"""Fold LayerNorm / RMSNorm into the following linear layers -> a "folded no-LayerNorm" model.

A pre-norm ``y = LN(x) W^T + c`` with ``LN(x) = w * (x - mean(x)) / sigma(x) + b`` is linear in x
except for the per-token scale sigma(x).  Freezing sigma to a constant s (its mean over a
reference batch) gives

    y = x (P diag(w) W^T) / s + (W b + c),    P = I - 11^T / D (centring; I for RMSNorm)

so every norm can be folded into the next linear layers (attention W_Q/W_K/W_V, MLP fc_in /
fc_gate, the unembedding) and removed.  The only approximation is sigma(x) -> s:

* :func:`freeze_norm_scales` returns a copy whose norms use the frozen scale (reference model);
* :func:`fold_layernorm` returns a copy with the norms folded away; its logits equal those of
  the frozen-scale copy up to float round-off (tested), and :func:`fold_gap` reports how far both
  are from the original model.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Iterator

import torch
from torch import nn

from dlmlab.analysis.heads import model_device
from dlmlab.models.norm import RMSNorm
from dlmlab.models.precision import upcast


class FrozenScaleNorm(nn.Module):
    """``w * (x - mean(x)) / s + b`` (LayerNorm) or ``w * x / s`` (RMSNorm) with a constant scale s."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, scale: float, center: bool) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().clone())
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.scale, self.center = float(scale), center

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.center:
            x = x - x.mean(-1, keepdim=True)
        y = self.weight * x / self.scale
        return y + self.bias if self.bias is not None else y


def _norm_sites(model) -> Iterator[tuple[nn.Module, str, list[nn.Linear]]]:
    """(owner, norm attribute, linear layers reading that norm's output) for every norm of the model."""
    for block in model.blocks:
        att = block.attn
        yield block, "ln1", [att.W_q, att.W_k, att.W_v]
        if getattr(block, "mlp", None) is not None:
            mlp = block.mlp
            yield block, "ln2", [mlp.fc_in] + ([mlp.fc_gate] if hasattr(mlp, "fc_gate") else [])
    yield model, "ln_final", [model.unembed]


def _norm_params(norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None, bool, float]:
    if isinstance(norm, nn.LayerNorm):
        D = norm.normalized_shape[-1]
        w = norm.weight if norm.weight is not None else torch.ones(D)
        return w.detach(), None if norm.bias is None else norm.bias.detach(), True, norm.eps
    if isinstance(norm, RMSNorm):
        return norm.weight.detach(), None, False, norm.eps
    if isinstance(norm, FrozenScaleNorm):
        return norm.weight, norm.bias, norm.center, 0.0
    raise TypeError(f"cannot fold a {type(norm).__name__}; only LayerNorm and RMSNorm are supported")


@torch.no_grad()
def norm_scales(model, tokens: torch.Tensor, **forward_kwargs) -> dict[str, float]:
    """Mean per-token scale (std for LayerNorm, rms for RMSNorm, incl. eps) of each norm's input on ``tokens``."""
    seen: dict[str, float] = {}
    handles = []
    for owner, attr, _ in _norm_sites(model):
        norm = getattr(owner, attr)
        if isinstance(norm, nn.Identity):
            continue
        _, _, center, eps = _norm_params(norm)
        key = _site_name(model, owner, attr)

        def hook(mod, inp, out, key=key, center=center, eps=eps):
            x = upcast(inp[0])  # float64 stays float64
            if center:
                x = x - x.mean(-1, keepdim=True)
            seen[key] = float((x.pow(2).mean(-1) + eps).sqrt().mean())

        handles.append(norm.register_forward_hook(hook))
    try:
        model(tokens.to(model_device(model)), **forward_kwargs)
    finally:
        for h in handles:
            h.remove()
    return seen


def _site_name(model, owner, attr: str) -> str:
    if owner is model:
        return attr
    return f"blocks.{list(model.blocks).index(owner)}.{attr}"


def freeze_norm_scales(model, scales: dict[str, float]) -> nn.Module:
    """Copy of ``model`` whose norms divide by the constant ``scales[name]`` instead of the per-token scale."""
    frozen = copy.deepcopy(model)
    for owner, attr, _ in _norm_sites(frozen):
        norm = getattr(owner, attr)
        if isinstance(norm, nn.Identity):
            continue
        name = _site_name(frozen, owner, attr)
        if name not in scales:
            raise KeyError(f"no frozen scale for norm {name!r}; compute them with norm_scales(model, tokens)")
        w, b, center, _ = _norm_params(norm)
        setattr(owner, attr, FrozenScaleNorm(w, b, scales[name], center))
    return frozen


def _with_bias(lin: nn.Linear) -> nn.Linear:
    if lin.bias is not None:
        return lin
    new = nn.Linear(lin.in_features, lin.out_features, bias=True, dtype=lin.weight.dtype, device=lin.weight.device)
    new.weight = nn.Parameter(lin.weight.detach().clone())
    nn.init.zeros_(new.bias)
    return new


@torch.no_grad()
def fold_layernorm(model, scales: dict[str, float]) -> nn.Module:
    """Copy of ``model`` with every norm folded into the linear layers after it and replaced by identity.

    ``scales`` = :func:`norm_scales` (the frozen sigma per norm).  The unembedding is untied from the
    token embedding and gets a bias; ``cfg.norm`` of the copy becomes "none" and ``cfg.bias`` True.
    """
    folded = copy.deepcopy(model)
    if getattr(folded.unembed, "weight", None) is getattr(folded.tok_emb, "weight", None):
        un = folded.unembed
        folded.unembed = nn.Linear(un.in_features, un.out_features, bias=False, dtype=un.weight.dtype,
                                   device=un.weight.device)
        folded.unembed.weight = nn.Parameter(un.weight.detach().clone())
    for owner, attr, _ in list(_norm_sites(folded)):
        norm = getattr(owner, attr)
        if isinstance(norm, nn.Identity):
            continue
        name = _site_name(folded, owner, attr)
        if name not in scales:
            raise KeyError(f"no frozen scale for norm {name!r}; compute them with norm_scales(model, tokens)")
        w, b, center, _ = _norm_params(norm)
        D = w.shape[0]
        eye = torch.eye(D, dtype=w.dtype, device=w.device)
        P = eye - 1.0 / D if center else eye
        fold_t = (w[:, None] * P) / scales[name]  # (P diag(w) / s)^T: x -> x P diag(w) / s, so W' = W fold_t
        # rebuild the linear layers of this site (attribute lookup again: the site may have been re-bound)
        for lin_owner, lin_attr in _linear_attrs(folded, owner, attr):
            lin = _with_bias(getattr(lin_owner, lin_attr))
            W = lin.weight.data.clone()  # [out, D]
            if b is not None:
                lin.bias.data += W @ b
            lin.weight.data = W @ fold_t.to(W.dtype)
            setattr(lin_owner, lin_attr, lin)
        setattr(owner, attr, nn.Identity())
    if hasattr(folded, "cfg"):
        folded.cfg = dataclasses.replace(folded.cfg, norm="none", bias=True, tie_embeddings=False)
    return folded


def _linear_attrs(model, owner, attr: str) -> list[tuple[nn.Module, str]]:
    if attr == "ln1":
        return [(owner.attn, n) for n in ("W_q", "W_k", "W_v")]
    if attr == "ln2":
        return [(owner.mlp, n) for n in ("fc_in", "fc_gate") if hasattr(owner.mlp, n)]
    return [(model, "unembed")]


@torch.no_grad()
def fold_gap(model, folded, tokens: torch.Tensor, **forward_kwargs) -> dict[str, float]:
    """How far the folded model is from the original on ``tokens``: max |logit diff| and mean KL (nats)."""
    x = tokens.to(model_device(model))
    a, b = upcast(model(x, **forward_kwargs)), upcast(folded(x, **forward_kwargs))
    la, lb = a.log_softmax(-1), b.log_softmax(-1)
    kl = (la.exp() * (la - lb)).sum(-1).mean()
    agree = (a.argmax(-1) == b.argmax(-1)).float().mean()
    return {"max_abs_logit_diff": float((a - b).abs().max()), "mean_kl": float(kl), "argmax_agreement": float(agree)}
