"""One call that loads every Hugging Face folder format the toolkit reads: :func:`load_hf`.

``load_hf(path)`` reads ``config.json`` (``model_type``; a config without one gets an error naming
the type its ``architectures`` suggest) and dispatches:

==========  ===========================================  ==========  =========  ============
format      loader                                       family      objective  attention
==========  ===========================================  ==========  =========  ============
gpt2        :func:`hf_gpt2.load_gpt2`                    transformer ar         causal
llama,      :func:`hf_llama.load_llama`                  transformer ar         causal
mistral,
qwen2
gpt_neox    :func:`hf_hooked.load_hf_hooked` (wrapped)   transformer ar         causal
mamba       :func:`hf_mamba.load_hf_mamba`               mamba       ar         causal
mamba2      :func:`hf_mamba.load_hf_mamba`               mamba2      ar         causal
llada       :func:`hf_llada.load_llada`                  transformer mdm        bidirectional
dream       :func:`hf_dream.load_dream`                  transformer mdm        bidirectional
==========  ===========================================  ==========  =========  ============

and returns ``(model, HFInfo)``.  Dream's diffusion output is shifted (``HFInfo.shift_logits``, True
for Dream only: the logits at ``i - 1`` predict the masked token ``i``;
:func:`dlmlab.models.hf_dream.align_logits` realigns them).
Nothing is downloaded and no code from the folder is executed (``trust_remote_code`` is never
used): LLaDA and Dream, whose published code is remote code, are read by the toolkit's own
mappings.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from dlmlab.models.hf_files import HFFormatError, read_config, tokenizer_path

FAMILY = {"gpt2": "transformer", "llama": "transformer", "mistral": "transformer", "qwen2": "transformer",
          "gpt_neox": "transformer", "mamba": "mamba", "mamba2": "mamba2", "llada": "transformer",
          "dream": "transformer"}
SUPPORTED = tuple(FAMILY)
# architectures[0] -> format, for configs written without model_type
_ARCHITECTURES = {"GPT2LMHeadModel": "gpt2", "GPT2Model": "gpt2", "LlamaForCausalLM": "llama",
                  "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2", "GPTNeoXForCausalLM": "gpt_neox",
                  "MambaForCausalLM": "mamba", "MambaModel": "mamba", "Mamba2ForCausalLM": "mamba2",
                  "Mamba2Model": "mamba2", "LLaDAModelLM": "llada", "DreamModel": "dream"}


@dataclass(frozen=True)
class HFInfo:
    """What :func:`load_hf` found in a folder.

    format: the model type ("gpt2", "llama", "mistral", "qwen2", "gpt_neox", "mamba", "mamba2",
        "llada", "dream"); family: "transformer" | "mamba" | "mamba2"; objective: "ar" | "mdm";
    mask_id: the mask token of an "mdm" model (None for "ar");
    shift_logits: whether the *diffusion* output is shifted: True only for Dream, whose logits at
        ``i - 1`` predict the (masked) token ``i``; False for LLaDA (logits at ``i`` predict token ``i``)
        and for every AR format, whose next-token shift is implied by objective "ar" (``dlmlab.load``'s
        ``Loaded.shift_logits`` is True for AR models and Dream alike);
    tokenizer_path: the folder when it holds tokenizer files;
    bidirectional: the model's default attention has no causal mask.
    """

    format: str
    family: str
    objective: str
    mask_id: int | None
    shift_logits: bool
    tokenizer_path: str | None
    bidirectional: bool


def hf_format(hf: dict, path: str | Path = "") -> str:
    """The toolkit format name of a ``config.json`` dict (UserError naming the type when unsupported)."""
    kind = hf.get("model_type")
    if not kind:
        archs = hf.get("architectures") or []
        kind = next((_ARCHITECTURES[a] for a in archs if a in _ARCHITECTURES), None)
        if kind is None:
            raise HFFormatError(f"{path}/config.json names no model_type (architectures {archs}); "
                                f"supported: {', '.join(SUPPORTED)}")
    fmt = str(kind).lower()
    if fmt not in FAMILY:
        raise HFFormatError(f"{path}: model_type {kind!r} is not supported; supported: {', '.join(SUPPORTED)}")
    return fmt


def load_hf(path: str | Path, dtype: torch.dtype = torch.float32) -> tuple[nn.Module, HFInfo]:
    """A local Hugging Face folder -> (hooked toolkit model in ``dtype``, :class:`HFInfo`); see the module docstring."""
    path = Path(path)
    hf = read_config(path)
    fmt = hf_format(hf, path)
    if not hf.get("model_type"):  # every loader checks config.json's model_type itself
        raise HFFormatError(f"{path}/config.json has no model_type; its architectures {hf.get('architectures')} "
                            f"suggest {fmt!r}: add \"model_type\": \"{fmt}\" to it")
    mask_id = None
    if fmt == "gpt2":
        from dlmlab.models.hf_gpt2 import load_gpt2

        model = load_gpt2(path, dtype=dtype)
    elif fmt in ("llama", "mistral", "qwen2"):
        from dlmlab.models.hf_llama import load_llama

        model = load_llama(path, dtype=dtype)
    elif fmt in ("mamba", "mamba2"):
        from dlmlab.models.hf_mamba import load_hf_mamba

        model = load_hf_mamba(path, dtype=dtype)
    elif fmt == "gpt_neox":
        from dlmlab.models.hf_hooked import load_hf_hooked

        model = load_hf_hooked(path, n_out=0, dtype=dtype)
    elif fmt == "llada":
        from dlmlab.models.hf_llada import load_llada

        model, mask_id = load_llada(path, dtype=dtype)
    else:  # dream
        from dlmlab.models.hf_dream import load_dream

        model, mask_id = load_dream(path, dtype=dtype)
    mdm = fmt in ("llada", "dream")
    info = HFInfo(format=fmt, family=FAMILY[fmt], objective="mdm" if mdm else "ar", mask_id=mask_id,
                  shift_logits=fmt == "dream", tokenizer_path=tokenizer_path(path), bidirectional=mdm)
    return model, info
