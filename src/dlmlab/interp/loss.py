"""TransformerLens's ``return_type`` on every dlmlab model: ``model(tokens, return_type="loss")``.

``return_type``: ``"logits"`` (the default: the forward as it is), ``None`` (run, return nothing), ``"loss"``
or ``"both"`` (``(logits, loss)``).  The keyword is taken by :class:`~dlmlab.interp.hooks.HookedModule`
before the model's own forward, so it also works in ``run_with_hooks`` and ``run_with_cache``.

Which loss: the model's objective, found in this order:

1. ``objective=`` given in the call;
2. ``model.objective`` (:func:`dlmlab.load` sets it to the run's objective; set it by hand on a model built
   another way);
3. none: a causal model (every SSM / RNN family, a Transformer with ``attn_mask="causal"``) gets
   TransformerLens's loss, the mean next-token cross-entropy of ``logits[:, :-1]`` against ``tokens[:, 1:]``;
   a bidirectional model without an objective is refused (its loss is its objective's, which it cannot guess).

An objective whose loss is the next-token loss (its ``next_token`` is true: the AR objective) gives
TransformerLens's loss from one forward of ``tokens`` (its ``pad_id`` ignored, as the objective does). Any other
objective (the masked-diffusion one) gives its own training loss on ``tokens``: for MDLM the NELBO per token of one
Monte-Carlo draw (a mask time per row and the masks), drawn from a CPU generator seeded with ``loss_seed`` (default
0, so the loss of the same tokens is the same number each call; average several seeds, or use
:func:`dlmlab.objectives.mdlm.elbo_bound`, for a tighter estimate). Its forward sees the corrupted tokens, and so
do the hooks; ``"both"`` returns that forward's logits.
``loss_per_token=True`` (AR losses only): the per-token losses [B, T-1] instead of their mean.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from dlmlab.errors import UserError

RETURN_TYPES = ("logits", "loss", "both", None)


def _is_causal(model) -> bool:
    cfg = getattr(model, "cfg", None)
    return getattr(cfg, "attn_mask", "causal") == "causal"


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor, pad_id: int | None = None,
                    per_token: bool = False) -> torch.Tensor:
    """TransformerLens's ``lm_cross_entropy_loss``: logits [B,T,V], tokens [B,T] -> mean NLL of ``tokens[:, 1:]``
    (``per_token``: [B, T-1]); ``pad_id`` targets are left out of the mean."""
    logp = logits[:, :-1].to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(-1)  # float64 stays
    tgt = tokens[:, 1:].to(logits.device)
    nll = -logp.gather(-1, tgt[..., None])[..., 0]
    if per_token:
        return nll
    if pad_id is None:
        return nll.mean()
    keep = tgt != pad_id
    return nll[keep].mean()


def call_with_return_type(model, call: Callable[..., torch.Tensor], tokens: torch.Tensor, *args,
                          return_type: Any = "logits", objective: Any = None, loss_seed: int = 0,
                          loss_per_token: bool = False, **kwargs):
    """``call(tokens, *args, **kwargs)`` (the model's plain forward) with TransformerLens's ``return_type``."""
    if return_type not in RETURN_TYPES:
        raise UserError(f"return_type must be one of {', '.join(map(repr, RETURN_TYPES))}, got {return_type!r}")
    if return_type in ("logits", None):
        if loss_per_token:
            raise UserError("loss_per_token=True needs return_type='loss' or 'both'")
        logits = call(tokens, *args, **kwargs)
        return logits if return_type == "logits" else None
    obj = objective if objective is not None else getattr(model, "objective", None)
    if obj is None and not _is_causal(model):
        raise UserError("return_type='loss' on a bidirectional model needs its objective: pass objective=run.objective "
                        "or set model.objective = run.objective (run = dlmlab.load(...)); a causal model without "
                        "one gets the next-token loss")
    if obj is None or getattr(obj, "next_token", False):
        logits = call(tokens, *args, **kwargs)
        loss = next_token_loss(logits, tokens, getattr(obj, "pad_id", None), loss_per_token)
        return loss if return_type == "loss" else (logits, loss)
    if loss_per_token:
        raise UserError(f"loss_per_token=True is for next-token (AR) losses; the {getattr(obj, 'name', 'given')} "
                        "objective's loss is one number")
    if not (callable(getattr(obj, "make_batch", None)) and callable(getattr(obj, "loss", None))):
        raise UserError(f"objective must be a dlmlab objective (make_batch and loss), got {type(obj).__name__}")
    if args:
        raise UserError("return_type='loss' with an objective takes the forward's options as keywords only")
    seen: dict[str, torch.Tensor] = {}

    def forward(x, **kw):  # the objective's forward: the plain one, remembering its logits
        seen["logits"] = call(x, **kw)
        return seen["logits"]

    batch = obj.make_batch(tokens, torch.Generator().manual_seed(int(loss_seed)))
    loss, _ = obj.loss(_Forward(model, forward), batch, **kwargs)
    return loss if return_type == "loss" else (seen["logits"], loss)


class _Forward:
    """The model as an objective sees it, with calls going to ``forward`` (attribute reads go to the model)."""

    def __init__(self, model, forward) -> None:
        self._model, self._forward = model, forward

    def __call__(self, x, **kw):
        return self._forward(x, **kw)

    def __getattr__(self, attr: str):
        return getattr(self._model, attr)
