"""Load Hugging Face Mamba / Mamba-2 checkpoints from a LOCAL directory into dlmlab models.

``load_hf_mamba(path)`` reads ``config.json`` (``model_type`` "mamba" or "mamba2") and
the weights (``model.safetensors`` / sharded ``*.safetensors`` / ``pytorch_model.bin``, read by
:mod:`dlmlab.models.hf_files`)
written by ``MambaModel`` / ``MambaForCausalLM`` / ``Mamba2Model`` / ``Mamba2ForCausalLM``
``.save_pretrained`` (original ``state-spaces`` names ``backbone.embedding`` also work)
and returns a :class:`~dlmlab.models.mamba.Mamba` or :class:`~dlmlab.models.mamba2.Mamba2`
with the same weights.  Nothing is downloaded.

``n_out`` (optional) replaces the LM head by a freshly initialised ``d_model -> n_out``
head (e.g. a tagging head for fine-tuning on a task); otherwise the LM head is
``lm_head`` when present and the (tied) input embedding when not, e.g. for a
backbone-only ``MambaModel`` save.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from dlmlab.config import ConfigError
from dlmlab.models.hf_files import HFFormatError, read_config, read_weights
from dlmlab.models.mamba import Mamba, MambaConfig
from dlmlab.models.mamba2 import Mamba2, Mamba2Config


def _strip(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """Backbone weights under dlmlab-style prefixes, and the lm_head weight if any."""
    head = state.get("lm_head.weight")
    out = {}
    for k, v in state.items():
        if k == "lm_head.weight":
            continue
        k = k.removeprefix("backbone.")
        k = k.replace("embedding.weight", "embeddings.weight")
        k = k.replace("embeddings.weight", "tok_emb.weight").replace("norm_f.", "ln_final.")
        k = k.replace("layers.", "blocks.", 1) if k.startswith("layers.") else k
        out[k] = v
    return out, head


def _num(v) -> float:
    """A float from config.json (transformers writes inf as {"__float__": "Infinity"})."""
    if isinstance(v, dict) and "__float__" in v:
        return float(v["__float__"])
    return float(v)


def hf_mamba_config(hf: dict, n_out: int = 0) -> MambaConfig | Mamba2Config:
    """Our config for an HF ``config.json`` dict."""
    kind = hf.get("model_type")
    if kind not in ("mamba", "mamba2"):
        raise ConfigError(f"config.json model_type must be 'mamba' or 'mamba2', got {kind!r}")
    for key in ("hidden_size", "vocab_size", "num_hidden_layers", "state_size"):
        if key not in hf:
            raise ConfigError(f"config.json of a {kind} checkpoint lacks {key!r}")
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"only hidden_act='silu' is supported, checkpoint has {act!r}")
    d = int(hf["hidden_size"])
    common = dict(
        vocab_size=int(hf["vocab_size"]), n_out=int(n_out), d_model=d, n_layers=int(hf["num_hidden_layers"]),
        d_state=int(hf["state_size"]), d_inner=int(hf.get("intermediate_size") or int(hf.get("expand", 2) * d)),
        d_conv=int(hf.get("conv_kernel", 4)), bias=bool(hf.get("use_bias", False)),
        conv_bias=bool(hf.get("use_conv_bias", True)), norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", kind == "mamba")),
    )
    if kind == "mamba":
        rank = hf.get("time_step_rank", "auto")
        rank = math.ceil(d / 16) if rank == "auto" else int(rank)
        cfg = MambaConfig(dt_rank=rank, **common)
    elif kind == "mamba2":
        limit = hf.get("time_step_limit", (0.0, float("inf")))
        if limit is not None and (_num(limit[0]) > 0 or math.isfinite(_num(limit[1]))):
            raise ConfigError(f"time_step_limit {limit} (dt clamping) is not supported")
        head_dim = int(hf.get("head_dim", 64))
        common["d_inner"] = int(hf.get("expand", 2) * d)
        if int(hf.get("num_heads", common["d_inner"] // head_dim)) * head_dim != common["d_inner"]:
            raise ConfigError(f"num_heads*head_dim ({hf.get('num_heads')}*{head_dim}) != intermediate size {common['d_inner']}")
        cfg = Mamba2Config(headdim=head_dim, n_groups=int(hf.get("n_groups", 1)), **common)
    cfg.validate()
    return cfg


def load_hf_mamba(path: str | Path, n_out: int = 0, dtype: torch.dtype | None = None) -> Mamba | Mamba2:
    """Build our model from a local HF Mamba / Mamba-2 directory (see module docstring)."""
    path = Path(path)
    hf = read_config(path)
    cfg = hf_mamba_config(hf, n_out=n_out)
    state, head = _strip(read_weights(path))
    new_head = n_out and n_out != cfg.vocab_size
    if not cfg.tie_embeddings and not new_head:
        if head is None:  # backbone-only save (MambaModel / Mamba2Model): read out with the embedding
            cfg.tie_embeddings = True
        else:
            state["unembed.weight"] = head
    model = Mamba(cfg) if isinstance(cfg, MambaConfig) else Mamba2(cfg)
    own = model.state_dict()
    if cfg.tie_embeddings and not new_head:
        own.pop("unembed.weight", None)
    if new_head:
        state.pop("unembed.weight", None)
        own.pop("unembed.weight", None)
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise HFFormatError(f"{path}: weights do not match the config: missing {missing[:5]}, unexpected {unexpected[:5]}")
    for k, v in state.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise HFFormatError(f"{path}: {k} has shape {tuple(v.shape)}, config implies {tuple(own[k].shape)}")
    model.load_state_dict(state, strict=False)
    if dtype is not None:
        model.to(dtype)
    return model
