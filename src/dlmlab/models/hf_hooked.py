"""A local Hugging Face model behind the toolkit's hook-point protocol.

:class:`HFHooked` wraps a Hugging Face decoder (GPT-NeoX / Pythia, Mamba, or any model whose
decoder layers sit in a ``layers`` / ``h`` / ``blocks`` ``ModuleList``) and exposes

* ``embed`` [B,T,D]: the token embedding (output of ``get_input_embeddings()``);
* ``blocks.{i}.resid_pre`` [B,T,D]: the input of decoder layer ``i``;
* ``blocks.{i}.mixer_out`` [B,T,D]: what the layer's token mixer adds to the residual stream.
  Mamba (``MambaBlock``): the ``mixer`` output, so ``resid_post = resid_pre + mixer_out``.
  GPT-NeoX: the attention output (after its dense projection).  Pythia uses the *parallel*
  residual, ``resid_post = resid_pre + mixer_out + mlp_out`` with the MLP reading
  ``resid_pre`` (not ``resid_pre + mixer_out``), so there mixer_out is one of two parallel
  branches and does not feed the MLP; with ``use_parallel_residual=False`` it does;
* ``blocks.{i}.mlp_out`` [B,T,D] (layers with an ``mlp``, e.g. GPT-NeoX): the MLP output;
* ``blocks.{i}.resid_post`` [B,T,D]: the output of decoder layer ``i``;
* ``final`` [B,T,D]: the base model's ``last_hidden_state`` (after its final norm);
* ``logits`` [B,T,n_out]: the head's output.

Two heads: ``n_out > 0`` puts a fresh ``nn.Linear(hidden, n_out)`` tagging head on the base
model (e.g. fine-tuning on a task); ``n_out = 0`` keeps the checkpoint's own LM head (the
model must be a ``*ForCausalLM``), so ``logits`` are over the vocabulary.

The hook points are driven by PyTorch forward (pre-)hooks on the HF modules, so ``cache``,
``replace``, ``add`` and patching work exactly as on the toolkit's own models, and the generic
analyses (probes, ablations, patching) apply unchanged.  :func:`load_hf_hooked` loads from a
LOCAL folder only (never a download, never remote code).
"""

from __future__ import annotations

from pathlib import Path

import contextlib
import functools
import types
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from dlmlab.errors import UserError
from dlmlab.interp.hooks import HookedModule, HookPoint
from dlmlab.models.checks import check_causal_keywords, check_tokens
from dlmlab.models.protocol import ProtocolMethods, family_name

#: protocol family of a Hugging Face ``model_type`` (other decoders count as transformers)
FAMILY_OF_MODEL_TYPE = {"mamba": "mamba", "mamba2": "mamba2"}


class CheckpointNotFound(UserError, FileNotFoundError):
    """A folder without a Hugging Face ``config.json``."""


class _Taps(nn.Module):
    def __init__(self, mlp: bool) -> None:
        super().__init__()
        self.resid_pre, self.mixer_out, self.resid_post = HookPoint(), HookPoint(), HookPoint()
        if mlp:
            self.mlp_out = HookPoint()


def _layer_list(base: nn.Module) -> nn.ModuleList:
    for name in ("layers", "h", "blocks"):
        mod = getattr(base, name, None)
        if isinstance(mod, nn.ModuleList) and len(mod):
            return mod
    raise ValueError(f"cannot find the decoder layers of {type(base).__name__} (looked for layers / h / blocks)")


def _mixer(layer: nn.Module) -> nn.Module | None:
    """The layer's token mixer: GPT-NeoX ``attention``, Mamba ``mixer`` (or ``attn`` / ``self_attn``)."""
    for name in ("attention", "mixer", "self_attn", "attn"):
        mod = getattr(layer, name, None)
        if isinstance(mod, nn.Module):
            return mod
    return None


def _fused_mamba_forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
    """``MambaMixer.forward`` of a whole sequence without cache or padding mask, with the toolkit's fused
    selective scan (:func:`dlmlab.models.fused_scan.fused_selective_scan`): the same math as HF's own
    path (which materialises [B, Di, T, N]); anything else (a cache, a mask, tensors off the CPU, where
    HF may have its CUDA kernels) takes HF's own path."""
    if cache is not None or attention_mask is not None or kwargs or hidden_states.device.type != "cpu":
        return type(self).forward(self, hidden_states, cache=cache, attention_mask=attention_mask, **kwargs)
    from dlmlab.models.fused_scan import fused_selective_scan

    T, dtype = hidden_states.shape[1], hidden_states.dtype
    x, gate = self.in_proj(hidden_states).chunk(2, dim=-1)  # [B,T,Di] each
    w = self.conv1d.weight  # [Di, 1, K]
    x = F.conv1d(x.transpose(1, 2).to(w.dtype), w, self.conv1d.bias, padding=w.shape[-1] - 1, groups=w.shape[0])
    x = self.act(x[..., :T]).transpose(1, 2).to(dtype)  # [B,T,Di]
    dt, B, C = torch.split(self.x_proj(x), [self.time_step_rank, self.ssm_state_size, self.ssm_state_size], dim=-1)
    dt = F.linear(dt, self.dt_proj.weight, self.dt_proj.bias)  # [B,T,Di], before softplus
    f = torch.float64 if dtype == torch.float64 else torch.float32
    A = -torch.exp(self.A_log.to(f))
    y = fused_selective_scan(x.to(f), dt.to(f), A.to(f), B.to(f), C.to(f), self.D.to(f), gate.to(f), dt_softplus=True)
    return self.out_proj(y.to(dtype))


def _route_output(hp: HookPoint, module, inputs, output):
    """Forward hook: a module's output (a tensor, or a tuple led by one) through ``hp``."""
    if isinstance(output, tuple):
        return (hp(output[0]), *output[1:])
    return hp(output)


def _route_input(hp: HookPoint, module, args, kwargs):
    """Forward pre-hook: a layer's ``hidden_states`` input (first positional or keyword) through ``hp``."""
    if args:
        return (hp(args[0]), *args[1:]), kwargs
    if "hidden_states" in kwargs:
        return args, {**kwargs, "hidden_states": hp(kwargs["hidden_states"])}
    return None


class HFHooked(ProtocolMethods, HookedModule):
    """HF decoder + head: tokens [B,T] (ids in ``[0, vocab_size)``) -> logits [B,T,n_out or vocab].

    ``model``: a base model (``GPTNeoXModel``, ``MambaModel``) or a causal LM (its ``base_model``
    is used).  ``n_out > 0``: new tagging head ``nn.Linear(hidden, n_out)``; ``n_out = 0``: the
    causal LM's own output embedding (tied weights stay tied).  The full HF model stays
    available as :attr:`hf_model` (e.g. for ``save_pretrained``).

    ``fused_mamba``: the Mamba mixers (``MambaMixer``) run full sequences with the toolkit's fused
    CPU selective scan instead of HF's reference PyTorch path (same result to float rounding,
    ~10x faster; the mixers of the wrapped HF model itself are switched, per instance).

    Protocol (:mod:`dlmlab.models.protocol`): ``family`` "mamba" / "mamba2" for those model types, else
    "transformer"; a residual stream; no KV cache; no attention hook points.
    """

    residual_stream = True  # resid_post = resid_pre + mixer_out (+ mlp_out)
    supports_kv_cache = False

    def __init__(self, model: nn.Module, n_out: int = 0, fused_mamba: bool = True) -> None:
        super().__init__()
        if n_out < 0:
            raise ValueError(f"n_out must be >= 0 (0 = the checkpoint's LM head), got {n_out}")
        base = getattr(model, "base_model", model)
        if n_out > 0:
            head = nn.Linear(base.config.hidden_size, n_out)
        else:
            head = model.get_output_embeddings() if base is not model else None
            if head is None:
                raise ValueError(f"{type(model).__name__} has no LM head; load a *ForCausalLM model or give n_out > 0")
        self.__dict__["hf_model"] = model  # not a submodule: its parameters are base's and head's
        self.family = FAMILY_OF_MODEL_TYPE.get(getattr(base.config, "model_type", ""), "transformer")
        self.base, self.head = base, head
        self.n_out = n_out or head.out_features
        self.vocab_size = base.get_input_embeddings().num_embeddings
        self.embed, self.final, self.logits = HookPoint(), HookPoint(), HookPoint()
        layers = _layer_list(base)
        self.blocks = nn.ModuleList([_Taps(isinstance(getattr(layer, "mlp", None), nn.Module)) for layer in layers])
        # hooks are partials of module-level functions (not closures), so copy.deepcopy maps them to the copy's points
        base.get_input_embeddings().register_forward_hook(functools.partial(_route_output, self.embed))
        for layer, taps in zip(layers, self.blocks):
            layer.register_forward_pre_hook(functools.partial(_route_input, taps.resid_pre), with_kwargs=True)
            layer.register_forward_hook(functools.partial(_route_output, taps.resid_post))
            mixer = _mixer(layer)
            if mixer is None:
                del taps.mixer_out
            else:
                mixer.register_forward_hook(functools.partial(_route_output, taps.mixer_out))
            if fused_mamba and type(mixer).__name__ == "MambaMixer":
                mixer.forward = types.MethodType(_fused_mamba_forward, mixer)
            if hasattr(taps, "mlp_out"):
                layer.mlp.register_forward_hook(functools.partial(_route_output, taps.mlp_out))
        self.setup_hooks()

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    def check_tokens(self, tokens: torch.Tensor) -> None:
        """Raise :class:`~dlmlab.models.checks.ModelInputError` unless tokens are [B,T] ints in [0, vocab_size)."""
        check_tokens(tokens, self.vocab_size, "for this checkpoint")

    def forward(self, tokens: torch.Tensor, *, attn_mask: str | None = None,
                prompt_len: torch.Tensor | int | None = None, embed_add: torch.Tensor | None = None,
                kv_cache=None) -> torch.Tensor:
        """tokens [B,T] -> logits [B,T,n_out].

        The protocol's keywords: ``attn_mask`` ``None`` / ``"causal"`` (these decoders are causal; anything
        else is refused); ``prompt_len`` ignored (it only matters for a "hybrid" mask); ``embed_add``
        [B,T,D] added to the input embedding after the ``embed`` hook point; ``kv_cache`` refused.
        """
        self.check_tokens(tokens)
        check_causal_keywords(family_name(self), attn_mask, kv_cache)
        x = self.base.get_input_embeddings()(tokens)  # runs the embed hook point
        if embed_add is not None:
            x = x + embed_add
        h = self.base(inputs_embeds=x, use_cache=False).last_hidden_state
        return self.logits(self.head(self.final(h)))


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Within the block, transformers prints errors only and draws no progress bars (load / save
    reports, notes about optional kernels); its settings are restored after."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def load_hf_hooked(path: str | Path, n_out: int = 0, dtype: torch.dtype = torch.float32,
                   fused_mamba: bool = True) -> HFHooked:
    """Load a Hugging Face model from the LOCAL folder ``path`` and wrap it.

    ``n_out = 0``: ``AutoModelForCausalLM`` (logits over the vocabulary); ``n_out > 0``:
    ``AutoModel`` (the base model; a causal-LM save loads its backbone) plus a fresh tagging head.
    Never downloads (``local_files_only``) and never runs code from the folder
    (``trust_remote_code=False``); a folder without ``config.json`` raises a one-line
    :class:`~dlmlab.errors.UserError`.
    """
    from transformers import AutoModel, AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").is_file():
        raise CheckpointNotFound(f"no Hugging Face checkpoint at {path}: "
                                 "expected a save_pretrained folder with config.json")
    cls = AutoModelForCausalLM if n_out == 0 else AutoModel
    from safetensors import SafetensorError

    try:
        with quiet_transformers():
            model = cls.from_pretrained(str(path), local_files_only=True, trust_remote_code=False, dtype=dtype)
    except (OSError, ValueError, KeyError, SafetensorError) as e:  # missing / corrupt / unknown-format files
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"cannot load the Hugging Face checkpoint at {path}: {first}") from e
    return HFHooked(model.eval(), n_out, fused_mamba)
