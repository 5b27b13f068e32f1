"""The one small interface the decoder drives, and the adapter for any bidirectional model.

:class:`Denoiser` is the interface: ``den(tokens, clean_len=, t=, attn=, kv_cache=, self_cond=, first=)`` ->
logits aligned to ``tokens`` (``out[:, i]`` predicts ``tokens[:, i]``), plus a few flags saying what the
model can do (KV caches and attention masks, self-conditioning, shifted logits, hook points).

:class:`ModelDenoiser` adapts any bidirectional model ``tokens [B,T] -> logits [B,T,V]`` (a toolkit
:class:`~dlmlab.models.Transformer` trained with the masked-diffusion objective, LLaDA / Dream loaded
into one, or any callable) given its mask id, which is required: the sampler never adds a mask token.
``shift_logits=True`` is Dream's convention (the logits at ``i - 1`` predict token ``i``).  A toolkit
attention model (its forward takes ``kv_cache``) gets every KV-reuse kind and ``block_causal`` attention;
any other callable is run on the whole canvas (``kv_reuse="none"``, ``attention="model"``).  Causal models
(a causal Transformer, Mamba, Mamba-2, LSTM, GRU) are refused unless ``allow_causal`` says the model
was trained to denoise that way (e.g. a ``dlmlab train`` mdlm run of a Mamba); they too run on the
whole canvas with their own mask.

A model with its own conditioning (e.g. :class:`~dlmlab.prediff.PreDiffLM`: time embedding,
self-conditioning, hybrid attention) plugs in through the same interface by providing
``model.as_denoiser(mask_id=None) -> Denoiser``; this module knows nothing of it.
"""

from __future__ import annotations

import inspect

import torch

from dlmlab.errors import UserError

CAUSAL_FAMILIES = ("mamba", "mamba2", "lstm", "gru")


class Denoiser:
    """What :func:`~dlmlab.sampling.decode.decode` drives.  Subclasses implement :meth:`__call__` and set:

    mask_id: the mask token id; shift: logits at ``i - 1`` predict token ``i``; prompt_causal: the clean
    prompt never attends to later positions (its keys/values can be reused exactly); uses_self_cond: takes
    ``self_cond``; supports_kv_cache: honours ``attn`` / ``kv_cache`` and :meth:`encode_context` (toolkit
    attention); alibi: ALiBi positions; hooked: a :class:`~dlmlab.interp.hooks.HookedModule` whose hook points a
    trace can record (None: none); model: the underlying module (put in eval mode by the decoder).
    """

    mask_id: int
    model = None
    hooked = None
    shift: bool = False
    prompt_causal: bool = False
    uses_self_cond: bool = False
    supports_kv_cache: bool = False
    alibi: bool = False

    def __call__(self, tokens: torch.Tensor, *, clean_len: int, t: torch.Tensor, attn: torch.Tensor | str | None = None,
                 kv_cache=None, self_cond: torch.Tensor | None = None, first: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B,T] at positions ``kv_cache.length ..`` -> aligned logits [B,T,V].

        clean_len: positions below it are clean context (prompt, finished blocks); t [B]: mask rate of the
        noisy part; attn: boolean "may attend" [1,1,T,Tk], "bidirectional", or None for the model's own mask;
        self_cond [B,T,V]; first [B,V]: logits predicting ``tokens[:, 0]`` (shifted models with a cache).
        """
        raise NotImplementedError

    def encode_context(self, tokens: torch.Tensor, kv_cache) -> torch.Tensor:
        """Run clean context tokens [B,P] alone (keys/values into ``kv_cache``) -> raw logits of the last position [B,V]."""
        raise UserError(f"{type(self).__name__} cannot cache keys/values (use kv_reuse='none')")

    def soft_prediction(self, logits: torch.Tensor) -> torch.Tensor:
        """Aligned logits [B,T,V] -> probabilities with the mask token excluded (self-conditioning input)."""
        logits = logits.detach().float().clone()
        logits[..., self.mask_id] = float("-inf")
        return logits.softmax(-1)

    def eval(self) -> None:
        """Put the model in eval mode (skipped when no submodule is training: ``Module.eval`` walks every
        submodule through ``__setattr__``, a large share of a one-forward decode of a small model)."""
        if not hasattr(self.model, "eval"):
            return
        modules = getattr(self.model, "modules", None)
        if callable(modules) and not any(getattr(m, "training", False) for m in modules()):
            return
        self.model.eval()


def _accepts(fn, name: str) -> bool:
    """True when ``fn`` names keyword ``name`` explicitly (not only through ``**kwargs``)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _family(model) -> str | None:
    fam = getattr(model, "family", None)
    if fam is None:
        fam = getattr(getattr(model, "cfg", None), "family", None)
    return fam if isinstance(fam, str) else None


def shift_align(raw: torch.Tensor, first: torch.Tensor | None = None) -> torch.Tensor:
    """Shifted logits [B,T,V] (``raw[:, i]`` predicts token ``i + 1``) -> aligned [B,T,V]: ``out[:, i] = raw[:, i-1]``;
    ``out[:, 0]`` is ``first`` [B,V] when given, else ``raw[:, 0]`` (never used: position 0 is prompt)."""
    head = first[:, None] if first is not None else raw[:, :1]
    return torch.cat([head.to(raw.dtype), raw[:, :-1]], dim=1)


class ModelDenoiser(Denoiser):
    """Any bidirectional model ``tokens [B,T] -> logits [B,T,V]`` with an explicit ``mask_id`` (see the module)."""

    def __init__(self, model, mask_id: int | None, shift_logits: bool = False, allow_causal: bool = False) -> None:
        if mask_id is None:
            raise UserError("mask_id is required for this model (e.g. dlmlab.load(path).mask_id); "
                            "the sampler never adds a mask token")
        if isinstance(mask_id, bool) or not isinstance(mask_id, int) or mask_id < 0:
            raise UserError(f"mask_id must be an integer >= 0, got {mask_id!r}")
        fam = _family(model)
        cfg = getattr(model, "cfg", None)
        kind = getattr(cfg, "attn_mask", None)
        causal = fam in CAUSAL_FAMILIES or kind == "causal"
        if causal and not allow_causal:
            what = f"a {fam} model" if fam in CAUSAL_FAMILIES else "a causal Transformer"
            raise UserError(f"{what} cannot denoise: the diffusion sampler needs a bidirectional model "
                            "(attn_mask 'bidirectional' or 'hybrid')")
        self.model = model
        self.mask_id = int(mask_id)
        self.shift = bool(shift_logits)
        self.prompt_causal = kind == "hybrid"
        flag = getattr(model, "supports_kv_cache", None)  # the model protocol's flag, when the model states it
        if not isinstance(flag, bool):
            blocks = getattr(model, "blocks", None)
            flag = (_accepts(getattr(model, "forward", model), "kv_cache") and bool(blocks)
                    and all(getattr(b, "attn", None) is not None for b in blocks))
        self.supports_kv_cache = not causal and kind is not None and flag
        self.hooked = model if callable(getattr(model, "cache", None)) and hasattr(model, "hook_points") else None
        self.alibi = getattr(cfg, "positions", None) == "alibi"
        vocab = getattr(cfg, "n_out", 0) or getattr(cfg, "vocab_size", None)
        if isinstance(vocab, int) and not 0 <= self.mask_id < vocab:
            raise UserError(f"mask_id {self.mask_id} outside the model vocabulary [0, {vocab})")

    def _raw(self, tokens, attn, clean_len, kv_cache) -> torch.Tensor:
        if self.supports_kv_cache:
            return self.model(tokens, attn_mask=attn, prompt_len=clean_len, kv_cache=kv_cache)
        if attn is not None or kv_cache is not None:
            raise UserError("this model takes no attention mask or KV cache: decode it with kv_reuse='none' and "
                            "attention='model'")
        out = self.model(tokens)
        out = getattr(out, "logits", out)
        if not isinstance(out, torch.Tensor) or out.shape[:2] != tokens.shape:
            raise UserError(f"the model must map tokens {tuple(tokens.shape)} to logits [B,T,V], got "
                            f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
        if out.shape[-1] <= self.mask_id:
            raise UserError(f"mask_id {self.mask_id} outside the model's {out.shape[-1]} output logits")
        return out

    def __call__(self, tokens: torch.Tensor, *, clean_len: int, t: torch.Tensor, attn=None, kv_cache=None,
                 self_cond: torch.Tensor | None = None, first: torch.Tensor | None = None) -> torch.Tensor:
        raw = self._raw(tokens, attn, clean_len, kv_cache)
        return shift_align(raw, first) if self.shift else raw

    def encode_context(self, tokens: torch.Tensor, kv_cache) -> torch.Tensor:
        if not self.supports_kv_cache:
            return super().encode_context(tokens, kv_cache)
        kind = "hybrid" if self.prompt_causal else "bidirectional"
        return self.model(tokens, attn_mask=kind, prompt_len=tokens.shape[1], kv_cache=kv_cache)[:, -1]


def as_denoiser(model, mask_id: int | None = None, shift_logits: bool = False) -> Denoiser:
    """The :class:`Denoiser` for ``model``: itself, the model's own (``model.as_denoiser(mask_id)``), or a
    :class:`ModelDenoiser` (``mask_id`` required)."""
    if isinstance(model, Denoiser):
        if mask_id is not None and mask_id != model.mask_id:
            raise UserError(f"mask_id {mask_id} differs from the denoiser's mask id {model.mask_id}")
        return model
    own = getattr(type(model), "as_denoiser", None)
    if callable(own):
        den = model.as_denoiser(mask_id)
        if shift_logits and not den.shift:
            raise UserError(f"{type(model).__name__} sets its own logit alignment; leave shift_logits unset")
        return den
    return ModelDenoiser(model, mask_id, shift_logits)
