"""ActivationCache: what ``model.run_with_cache(tokens)`` returns, with TransformerLens-style helpers.

A mapping from hook name to the activation recorded there (``cache["blocks.0.resid_post"]``,
TransformerLens's ``cache["blocks.0.hook_resid_post"]`` (:mod:`dlmlab.interp.tl_names`), or
``cache["resid_post", 0]`` for ``blocks.0.resid_post`` / ``cache["pattern", 1]`` for
``blocks.1.attn.pattern``), with ``grads`` (d loss / d activation, when run with ``loss_fn``),
``step`` (e.g. the denoising step it was recorded at) and ``meta`` (the forward keywords used).
Points ``run_with_cache(names=None)`` defers (attention patterns) are listed and computed on first read.
A norm's opt-in points (``ln_final.normalized`` / ``scale``, ``blocks.{i}.ln1|ln2.*``; TransformerLens's
``hook_normalized`` / ``hook_scale``), when not recorded, are computed on read from the cached stream the norm reads.

Residual-stream helpers (models with ``model.residual_stream``; names of :mod:`dlmlab.models.protocol`):

* :meth:`ActivationCache.accumulated_resid` [n+1, B, T, D]: the stream before each block and after the last;
* :meth:`ActivationCache.decompose_resid` [C, B, T, D]: embed (+ pos_embed, + embed_add), then each
  block's ``mixer_out`` (and ``mlp_out``), summing to the stream;
* :meth:`ActivationCache.stack_head_results` [layers*H, B, T, D]: per-head attention outputs built on
  demand from the cached ``z`` and W_O (attention models; nothing per-head needs caching);
* :meth:`ActivationCache.apply_ln_to_stack`: a stack of parts of the stream seen through a norm,
  centred and divided by the scale of the cached full stream there, without the norm's weight
  (TransformerLens's convention; ``weighted=True`` applies it);
* :meth:`ActivationCache.logit_attrs`: direct logit attribution of each part of such a stack;
* :meth:`ActivationCache.stack_activation`, :meth:`ActivationCache.remove_batch_dim`: TransformerLens's;
* :meth:`ActivationCache.logit_lens`: the stream after each block through the final norm and unembedding.

This module sits beside :mod:`dlmlab.interp.hooks` (below the models, which import the hooks) and imports
no model: what it needs of one it asks the model through the protocol's methods
(:class:`~dlmlab.models.protocol.ProtocolMethods`: ``norm_scale`` / ``scale_like_norm``, ``has_attention``,
``family_name``).

A helper that needs a point the model lacks (attention heads on a Mamba, a residual stream on a
plain LSTM) or the cache lacks (not in ``names``) raises a one-line :class:`~dlmlab.errors.UserError`.
The helpers compute without autograd (their results carry no graph).
:func:`to_str_tokens` turns ids into one string per token with any toolkit or Hugging Face tokenizer.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch
from torch import nn

from dlmlab.errors import UserError


class MissingActivation(UserError, KeyError):
    """A hook name that is not in the cache (or not a point of the model)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _model_name(model) -> str:
    """How messages name the model: its ``family_name`` (the protocol's), else its family, else its class."""
    name = getattr(model, "family_name", None) or getattr(model, "family", None)
    return name if isinstance(name, str) else type(model).__name__


def _protocol_method(model, name: str, needed_by: str):
    method = getattr(model, name, None)
    if not callable(method):
        raise UserError(f"{needed_by} needs model.{name}() (the dlmlab model protocol, dlmlab.models.protocol); "
                        f"this {type(model).__name__} has none")
    return method


class ActivationCache(Mapping):
    """Activations of one forward by hook name (tensors as recorded: [B,T,...]).

    ``model``: the model that produced them (its weights and norms are used by the helpers);
    ``grads``: hook name -> d loss / d activation (empty unless run with ``loss_fn``);
    ``step``: optional step index (sampling trajectories); ``meta``: free-form facts about the run."""

    def __init__(self, store: dict[str, torch.Tensor], model: nn.Module, *, step: int | None = None,
                 grads: dict[str, torch.Tensor] | None = None, meta: dict[str, Any] | None = None) -> None:
        self._store = store
        self._pending: list[str] = []  # deferred points not computed yet (see defer)
        self._compute = None
        self.model = model
        self.step = step
        self.grads: dict[str, torch.Tensor] = grads or {}
        self.meta: dict[str, Any] = meta or {}

    # -- mapping --------------------------------------------------------------------------------
    def _key(self, key) -> str:
        if isinstance(key, str):
            if key in self._store or "hook_" not in key:
                return key
            from dlmlab.interp.tl_names import from_tl_name  # TransformerLens's spelling: blocks.0.attn.hook_pattern

            return from_tl_name(key)
        if (isinstance(key, tuple) and len(key) in (2, 3) and isinstance(key[0], str) and isinstance(key[1], int)
                and (len(key) == 2 or key[2] is None or isinstance(key[2], str))):
            return self._short_name(key[0], self._layer_index(key[1]), key[2] if len(key) == 3 else None)
        raise TypeError(f"cache keys are hook names, (name, layer) or (name, layer, sublayer) tuples, got {key!r}")

    def _short_name(self, short: str, layer: int, sublayer: str | None) -> str:
        """The hook name of ``cache[short, layer(, sublayer)]``, TransformerLens's short names included
        (``"pattern"``, ``"hook_z"``, ``"result"``, ``("normalized", 0, "ln1")``)."""
        short = _SHORT_ALIASES.get(short.removeprefix("hook_"), short.removeprefix("hook_"))
        if sublayer is not None:
            sub = _SUBLAYER_ALIASES.get(sublayer, sublayer)
            return f"blocks.{layer}.{sub}.{short}" if sub else f"blocks.{layer}.{short}"
        for name in (f"blocks.{layer}.{short}", f"blocks.{layer}.attn.{short}", f"blocks.{layer}.mlp.{short}",
                     f"blocks.{layer}.mixer.{short}"):
            if name in self._store or name in self._points():
                return name
        return f"blocks.{layer}.{short}"

    def _points(self) -> dict:
        return getattr(self.model, "hook_points", {}) or {}

    def defer(self, names: Sequence[str], compute) -> None:
        """List ``names`` as held but computed on first read: ``compute()`` -> {name: tensor} for all of them
        (``run_with_cache`` defers the attention patterns this way)."""
        self._pending = [n for n in names if n not in self._store]
        self._compute = compute

    @property
    def deferred(self) -> list[str]:
        """The points this cache holds but has not computed yet."""
        return list(self._pending)

    def _fill(self) -> None:
        got = self._compute()
        for n in self._pending:
            self._store[n] = got[n]
        self._pending, self._compute = [], None

    def __getitem__(self, key) -> torch.Tensor:
        name = self._key(key)
        if name in self._pending:
            self._fill()
        if name not in self._store and name in self._points() and _NORM_POINT.match(name):
            derived = self._norm_point(name)
            if derived is not None:
                return derived
        try:
            return self._store[name]
        except KeyError:
            raise self._missing(name) from None

    @torch.no_grad()
    def _norm_point(self, name: str) -> torch.Tensor | None:
        """A norm's ``scale`` [..., 1] / ``normalized`` [..., D] (opt-in points) computed from the cached stream
        it reads, as the norm computes them; None when that stream is not cached."""
        m = _NORM_POINT.match(name)
        layer = self.n_layers if m.group(1) is None else int(m.group(1))
        mlp_input = m.group(2) == "ln2"
        stream = (f"blocks.{self.n_layers - 1}.resid_post" if layer == self.n_layers
                  else f"blocks.{layer}.{'resid_mid' if mlp_input else 'resid_pre'}")
        if stream not in self:
            return None
        resid, norm = self[stream], self._norm_at(layer, mlp_input)
        scale = _protocol_method(self.model, "norm_scale", "a norm's hook point")(norm, resid)
        if m.group(3) == "scale":
            return scale[..., None].to(resid.dtype)
        return _protocol_method(self.model, "scale_like_norm", "a norm's hook point")(norm, resid, scale, weight=False)

    def _missing(self, name: str, needed_by: str = "") -> MissingActivation:
        who = f"{needed_by} needs " if needed_by else ""
        if name in self._points():
            return MissingActivation(f"{who}{name!r}, which this cache does not hold; run "
                                     f"model.run_with_cache(tokens, names=[..., {name!r}]) (or names=None)")
        close = difflib.get_close_matches(name, list(dict.fromkeys([*self, *self._points()])), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        return MissingActivation(f"{who}hook point {name!r}, which this {_model_name(self.model)} model does not "
                                 f"have{hint}")

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._store) + self._pending)

    def __len__(self) -> int:
        return len(self._store) + len(self._pending)

    def __contains__(self, key) -> bool:
        try:
            name = self._key(key)
        except TypeError:
            return False
        return name in self._store or name in self._pending

    def __repr__(self) -> str:
        step = f", step={self.step}" if self.step is not None else ""
        return f"ActivationCache({len(self)} activations{step}, {len(self.grads)} grads)"

    def to(self, device) -> "ActivationCache":
        """A copy with every tensor on ``device``."""
        return ActivationCache({k: v.to(device) for k, v in self.items()}, self.model, step=self.step,
                               grads={k: v.to(device) for k, v in self.grads.items()}, meta=dict(self.meta))

    # -- model structure -------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(getattr(self.model, "blocks", ()))

    def _layer_index(self, layer: int) -> int:
        n = self.n_layers
        if not -n <= layer < n:
            raise UserError(f"layer {layer} out of range for a model with {n} blocks")
        return layer % n

    def _upto(self, layer: int | None) -> int:
        """TransformerLens's ``layer``: None / -1 / n_layers -> n_layers (everything), else 0..n_layers."""
        n = self.n_layers
        if layer is None or layer == -1:
            return n
        if not 0 <= layer <= n:
            raise UserError(f"layer must be in 0..{n} (or None / -1 for all {n} blocks), got {layer}")
        return layer

    def _get(self, name: str, needed_by: str) -> torch.Tensor:
        if name not in self:
            raise self._missing(name, needed_by)
        return self[name]

    def _need_residual(self, what: str) -> None:
        if getattr(self.model, "residual_stream", True) is False:
            raise UserError(f"{what} needs a residual stream; this {_model_name(self.model)} model has none "
                            "(residual=False: each layer replaces its input, see dlmlab.models.protocol)")

    def _need(self, attr: str, what: str) -> Any:
        mod = getattr(self.model, attr, None)
        if mod is None:
            raise UserError(f"{what} needs model.{attr}; this {type(self.model).__name__} has none")
        return mod

    def _resid_at(self, layer: int, mlp_input: bool = False) -> tuple[str, torch.Tensor]:
        """(name, tensor) of the residual stream read by block ``layer``'s first norm (or its MLP's norm),
        or, for layer == n_layers, by the final norm."""
        n = self.n_layers
        if layer == n:
            if mlp_input:
                raise UserError("mlp_input applies to a block's MLP, not to the final norm (layer == n_layers)")
            return f"blocks.{n - 1}.resid_post", self._get(f"blocks.{n - 1}.resid_post", "the final norm's input")
        name = f"blocks.{layer}.resid_mid" if mlp_input else f"blocks.{layer}.resid_pre"
        return name, self._get(name, "this layer's norm input")

    def _norm_at(self, layer: int, mlp_input: bool = False) -> nn.Module:
        if layer == self.n_layers:
            return self._need("ln_final", "the final norm")
        block = self.model.blocks[layer]
        attr = "ln2" if mlp_input else ("ln1" if hasattr(block, "ln1") else "norm")
        norm = getattr(block, attr, None)
        if norm is None:
            raise UserError(f"block {layer} of this {_model_name(self.model)} model has no norm before its "
                            f"{'MLP' if mlp_input else 'mixer'}")
        return norm

    # -- residual stream -------------------------------------------------------------------------
    @torch.no_grad()
    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                          mlp_input: bool = False, return_labels: bool = False):
        """The residual stream before blocks 0..layer-1 and at the input of ``layer`` [layer+1, B, T, D]
        (``layer`` None / -1: all blocks, the last entry being the stream after the last block).

        incl_mid: also each ``resid_mid`` (Transformers with an MLP); mlp_input: end at ``layer``'s
        ``resid_mid``.  apply_ln: for the final layer, the final norm applied to each entry with its own
        scale (the logit lens); for an earlier layer, that layer's norm with the cached scale
        (:meth:`apply_ln_to_stack`).  Labels are hook names."""
        self._need_residual("accumulated_resid")
        upto, n = self._upto(layer), self.n_layers
        names = []
        for i in range(upto + 1):
            if i == n:
                names.append(f"blocks.{n - 1}.resid_post")
                continue
            names.append(f"blocks.{i}.resid_pre")
            if (incl_mid and i < upto) or (mlp_input and i == upto):
                names.append(f"blocks.{i}.resid_mid")
        stack = torch.stack([self._get(nm, "accumulated_resid") for nm in names])
        if apply_ln:
            if upto == n:
                stack = self._need("ln_final", "accumulated_resid(apply_ln=True)")(stack)
            else:
                stack = self.apply_ln_to_stack(stack, upto, mlp_input=mlp_input)
        return (stack, names) if return_labels else stack

    @torch.no_grad()
    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, incl_embeds: bool = True, return_labels: bool = False):
        """The residual stream at the input of ``layer`` (None / -1: after the last block) as a stack of the
        parts that were added to make it [C, B, T, D]: ``embed`` (+ ``pos_embed``, + ``embed_add``: what the
        forward added to the embedding, when it was given), then per block ``mixer_out`` and ``mlp_out``.

        mode: "all", "mixer" (only the mixers; "attn" is a synonym) or "mlp".  mlp_input: add ``layer``'s
        ``mixer_out`` (the stream its MLP reads).  apply_ln: :meth:`apply_ln_to_stack` at ``layer``.
        The parts sum to the cached stream (``mode="all"``, ``incl_embeds=True``)."""
        self._need_residual("decompose_resid")
        if mode not in ("all", "mixer", "attn", "mlp"):
            raise UserError(f"mode must be 'all', 'mixer' ('attn') or 'mlp', got {mode!r}")
        upto, n = self._upto(layer), self.n_layers
        points = self._points()
        parts: list[tuple[str, torch.Tensor]] = []
        if incl_embeds:
            parts.append(("embed", self._get("embed", "decompose_resid")))
            if getattr(self.model, "pos_emb", None) is not None:  # learned positions
                parts.append(("pos_embed", self._get("pos_embed", "decompose_resid")))
            if self.meta.get("embed_add"):
                rest = self._get("blocks.0.resid_pre", "decompose_resid") - sum(p for _, p in parts)
                parts.append(("embed_add", rest))
        want_mixer, want_mlp = mode != "mlp", mode in ("all", "mlp")
        for i in range(upto + (1 if mlp_input else 0)):
            if i >= n:
                raise UserError("mlp_input applies to a block's MLP, not to the final norm (layer == n_layers)")
            if want_mixer:
                parts.append((f"blocks.{i}.mixer_out", self._get(self._mixer_name(i), "decompose_resid")))
            if want_mlp and i < upto and f"blocks.{i}.mlp_out" in points:
                parts.append((f"blocks.{i}.mlp_out", self._get(f"blocks.{i}.mlp_out", "decompose_resid")))
        if not parts:
            ref = self._get("embed", "decompose_resid")
            stack = ref.new_zeros((0,) + tuple(ref.shape))
        else:
            stack = torch.stack([p for _, p in parts])
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, upto, mlp_input=mlp_input)
        labels = [nm for nm, _ in parts]
        return (stack, labels) if return_labels else stack

    def _mixer_name(self, i: int) -> str:
        """``blocks.{i}.mixer_out``, or the family's name for it on models built before the protocol."""
        for nm in (f"blocks.{i}.mixer_out", f"blocks.{i}.attn_out", f"blocks.{i}.rnn_out"):
            if nm in self._store:
                return nm
        return f"blocks.{i}.mixer_out"

    @torch.no_grad()
    def apply_ln_to_stack(self, stack: torch.Tensor, layer: int | None = None, mlp_input: bool = False,
                          weighted: bool = False) -> torch.Tensor:
        """Parts of the residual stream [C, B, T, D] seen through the norm that reads the stream at ``layer``
        (None / -1: the final norm; else block ``layer``'s first norm, or its MLP's with ``mlp_input``).

        As TransformerLens: each part is centred (LayerNorm) and divided by the per-token scale of the
        *cached full stream* there (so the parts keep adding up), and neither the norm's weight nor its
        bias is applied, so ``apply_ln_to_stack(parts).sum(0)`` is the norm's ``normalized`` point (the
        norm's output before its weight and bias; after :func:`~dlmlab.analysis.fold.fold_ln` the weight
        is 1 and the bias 0, so it is then the norm's output).  ``weighted=True`` (not TransformerLens):
        also multiply by the norm's weight, so ``apply_ln_to_stack(parts, weighted=True).sum(0) + bias``
        is the norm's output on any model.  The stack's shape ends in the cached stream's ([B, T, D], or
        [T, D] after :meth:`remove_batch_dim`)."""
        upto = self._upto(layer)
        _, resid = self._resid_at(upto, mlp_input)
        norm = self._norm_at(upto, mlp_input)
        if tuple(stack.shape[1:]) != tuple(resid.shape):
            raise UserError(f"apply_ln_to_stack wants a stack [C, {', '.join(map(str, resid.shape))}] "
                            f"(parts of the cached stream), got {tuple(stack.shape)}")
        scale = _protocol_method(self.model, "norm_scale", "apply_ln_to_stack")(norm, resid)
        like_norm = _protocol_method(self.model, "scale_like_norm", "apply_ln_to_stack")
        return like_norm(norm, stack, scale) if weighted else like_norm(norm, stack, scale, weight=False)

    @torch.no_grad()
    def stack_head_results(self, layer: int | None = None, apply_ln: bool = False, return_labels: bool = False):
        """Per-head attention outputs of blocks 0..layer-1 (None / -1: all) [layer*H, B, T, D], built from
        the cached ``blocks.{i}.attn.z`` [B,T,H,d_head] and W_O [H,d_head,D] (labels ``L{i}H{h}``).

        Per block they sum, plus W_O's bias, to that block's ``mixer_out``.  apply_ln:
        :meth:`apply_ln_to_stack` at ``layer``.  Attention models only."""
        has_attention = getattr(self.model, "has_attention", None)
        if not (callable(has_attention) and has_attention()):
            raise UserError(f"stack_head_results needs attention heads (blocks.{{i}}.attn.z); this "
                            f"{_model_name(self.model)} model has none: use decompose_resid for each block's mixer_out")
        upto = self._upto(layer)
        parts, labels = [], []
        for i in range(upto):
            z = self._get(f"blocks.{i}.attn.z", "stack_head_results")  # [B,T,H,dh]
            attn = self.model.blocks[i].attn
            H, dh = z.shape[-2], z.shape[-1]
            W_O = attn.W_o.weight.detach().T.reshape(H, dh, -1).to(z.dtype)  # [H, dh, D]
            parts.append(torch.einsum("...hd,hdm->h...m", z, W_O))
            labels += [f"L{i}H{h}" for h in range(H)]
        if parts:
            stack = torch.cat(parts)
        else:
            ref = self._get("embed", "stack_head_results")
            stack = ref.new_zeros((0,) + tuple(ref.shape))
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, upto)
        return (stack, labels) if return_labels else stack

    @torch.no_grad()
    def logit_attrs(self, stack: torch.Tensor, tokens: torch.Tensor | int | str,
                    incorrect_tokens: torch.Tensor | int | str | None = None,
                    layer: int | None = None, weighted: bool = False) -> torch.Tensor:
        """Direct logit attribution [C, B, T]: each part of ``stack`` [C, B, T, D], through the final norm
        (:meth:`apply_ln_to_stack`: centred, divided by the cached scale, the norm's weight not applied, as
        TransformerLens), dotted with ``W_U[:, tokens]`` (``tokens`` [B, T], [B] or one id; minus that of
        ``incorrect_tokens``: a logit difference; a string is one token).  After
        :func:`~dlmlab.analysis.fold.fold_ln` the parts'
        attributions plus the unembedding bias sum to the logit; ``weighted=True`` (not TransformerLens)
        applies the norm's weight, so they do on any model, with the norm bias's image added."""
        unembed = self._need("unembed", "logit_attrs")
        normed = self.apply_ln_to_stack(stack, layer, weighted=weighted)
        tokens = self._token_ids(tokens)
        if incorrect_tokens is not None:
            incorrect_tokens = self._token_ids(incorrect_tokens)
        W_U = unembed.weight.detach()  # [V, D]
        direction = W_U[tokens.to(W_U.device)]
        if incorrect_tokens is not None:
            direction = direction - W_U[incorrect_tokens.to(W_U.device)]
        if direction.dim() == normed.dim() - 2:  # one id per row [B]: the same id at every position
            direction = direction[..., None, :]
        return (normed * direction.to(normed.dtype)).sum(-1)

    def _token_ids(self, tokens) -> torch.Tensor:
        """ids as a tensor; a string is one token (``model.to_single_token``), as in TransformerLens."""
        if isinstance(tokens, str):
            return torch.tensor(_protocol_method(self.model, "to_single_token", "logit_attrs with a string")(tokens))
        return torch.as_tensor(tokens)

    # -- TransformerLens's stacking and batch helpers --------------------------------------------
    def stack_activation(self, activation_name: str, layer: int = -1, sublayer_type: str | None = None) -> torch.Tensor:
        """``cache[activation_name, l(, sublayer_type)]`` for blocks 0..layer-1 (-1: all) stacked [layers, ...]
        (TransformerLens's: ``stack_activation("pattern")`` -> [n_layers, B, H, T, T])."""
        upto = self._upto(layer)
        keys = [(activation_name, i) if sublayer_type is None else (activation_name, i, sublayer_type)
                for i in range(upto)]
        return torch.stack([self[k] for k in keys])

    @property
    def has_batch_dim(self) -> bool:
        return not self.meta.get("batch_removed", False)

    def remove_batch_dim(self) -> "ActivationCache":
        """TransformerLens's: drop the batch dimension of every activation (and gradient) of a batch-of-one cache,
        in place (returns the cache); the helpers then take stacks [C, T, D] and tokens [T]."""
        if not self.has_batch_dim:
            return self
        if self._pending:
            self._fill()
        sizes = {int(v.shape[0]) for v in list(self._store.values()) + list(self.grads.values())}
        if sizes != {1}:
            raise UserError(f"remove_batch_dim needs a batch of one; this cache's batch is {sorted(sizes)}")
        for store in (self._store, self.grads):
            for k in list(store):
                store[k] = store[k][0]
        self.meta["batch_removed"] = True
        return self

    # -- logit lens --------------------------------------------------------------------------------
    @torch.no_grad()
    def logit_lens(self, positions: Sequence[int] | slice | None = None) -> "LogitLens":
        """The residual stream before each block and after the last, through the final norm (each with its
        own scale) and the unembedding: ``LogitLens.logits`` [n+1, B, T', V] (T': ``positions``).
        The last entry equals the model's logits."""
        self._need_residual("logit_lens")
        stack, labels = self.accumulated_resid(apply_ln=True, return_labels=True)
        if positions is not None:
            stack = stack[:, :, positions]
        unembed = self._need("unembed", "logit_lens")
        return LogitLens(unembed(stack.to(unembed.weight.dtype)), labels)


_NORM_POINT = re.compile(r"^(?:blocks\.(\d+)\.(ln1|ln2)|ln_final)\.(scale|normalized)$")
# TransformerLens's short activation names (utils.get_act_name) that are not dlmlab's
_SHORT_ALIASES = {"result": "head_out", "attn": "pattern", "key": "k", "query": "q", "value": "v",
                  "mlp_post": "post", "mlp_pre": "pre"}
_SUBLAYER_ALIASES = {"a": "attn", "attention": "attn", "m": "mlp", "b": "", "block": "", "blocks": ""}


@dataclass
class LogitLens:
    """logits [n_layers+1, B, T, V] of the residual stream at each depth; labels: the hook names read."""

    logits: torch.Tensor
    labels: list[str]

    def top(self, k: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
        """(probabilities, token ids) of the ``k`` most likely tokens at each depth [n+1, B, T, k]."""
        return self.logits.float().softmax(-1).topk(k, dim=-1)

    def rank(self, target: torch.Tensor) -> torch.Tensor:
        """Rank (0 = top) of ``target`` [B, T] ids at each depth [n+1, B, T]."""
        t = target.to(self.logits.device)[None, ..., None].expand(self.logits.shape[0], *target.shape, 1)
        chosen = self.logits.gather(-1, t)
        return (self.logits > chosen).sum(-1)


def to_str_tokens(tokenizer, tokens) -> list[str] | list[list[str]]:
    """One string per token: ``tokens`` a [T] / [B,T] tensor or a list of ids (or a text, encoded first),
    decoded one id at a time with ``tokenizer.decode`` (toolkit CharTokenizer / BPETokenizer or a
    Hugging Face tokenizer).  A byte-level BPE token that is part of a multi-byte character decodes to
    the replacement character, as it does in TransformerLens."""
    if not hasattr(tokenizer, "decode"):
        raise UserError(f"to_str_tokens needs a tokenizer with decode(ids), got a {type(tokenizer).__name__}")
    if isinstance(tokens, str):
        tokens = tokenizer.encode(tokens)
        if hasattr(tokens, "ids"):
            tokens = tokens.ids
    if isinstance(tokens, torch.Tensor):
        if tokens.dim() > 2:
            raise UserError(f"to_str_tokens wants ids of shape [T] or [B, T], got {tuple(tokens.shape)}")
        tokens = tokens.tolist()
    if tokens and isinstance(tokens[0], (list, tuple)):
        return [to_str_tokens(tokenizer, list(row)) for row in tokens]
    return [tokenizer.decode([int(t)]) for t in tokens]
