"""Hugging Face GPT-2 <-> dlmlab :class:`Transformer`, from / to a local directory.

``load_gpt2(path)`` reads ``config.json`` + the weights written by
``GPT2LMHeadModel.save_pretrained`` (``model.safetensors``, sharded, or ``pytorch_model.bin``
through PyTorch's restricted unpickler; see :mod:`dlmlab.models.hf_files`) and returns an
equivalent Transformer (learned positions, LayerNorm, GELU-tanh MLP, tied unembedding, causal
mask) whose hook points work as usual.  Nothing is downloaded.

``save_gpt2(model, path)`` writes a compatible Transformer back in the same
format, so ``GPT2LMHeadModel.from_pretrained(path)`` loads it.

Weight mapping (HF ``Conv1D`` stores ``[in, out]``; ``nn.Linear`` stores ``[out, in]``):
  wte -> tok_emb, wpe -> pos_emb, h.i.ln_1/ln_2 -> blocks.i.ln1/ln2,
  h.i.attn.c_attn (q|k|v concatenated) -> blocks.i.attn.W_q/W_k/W_v,
  h.i.attn.c_proj -> W_o, h.i.mlp.c_fc/c_proj -> blocks.i.mlp.fc_in/fc_out, ln_f -> ln_final.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from dlmlab.models.config import TransformerConfig
from dlmlab.models.hf_files import HFFormatError, read_config, read_weights
from dlmlab.models.transformer import Transformer

# HF activation name -> our MLP kind (only exact equivalents).
_ACT_IN = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
_ACT_OUT = {"gelu_new": "gelu_new", "gelu": "gelu", "relu": "relu"}


class HFConversionError(HFFormatError):
    """A checkpoint folder or model that cannot be converted; the message says why."""


def _read_config(path: Path) -> dict:
    raw = read_config(path)  # clear errors for a missing folder / config.json first
    model_type = raw.get("model_type")
    if model_type != "gpt2":
        raise HFConversionError(f"{path / 'config.json'} describes model_type {model_type!r}, not 'gpt2'")
    return raw


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    # GPT2LMHeadModel prefixes "transformer."; a bare GPT2Model does not.
    return {k.removeprefix("transformer."): v for k, v in read_weights(path).items()}


def gpt2_config_to_ours(hf) -> TransformerConfig:
    """A :class:`TransformerConfig` equivalent to a ``transformers.GPT2Config``."""
    act = hf.activation_function
    if act not in _ACT_IN:
        raise HFConversionError(f"GPT-2 activation_function {act!r} is not supported (use one of {sorted(_ACT_IN)})")
    if not hf.scale_attn_weights or hf.scale_attn_by_inverse_layer_idx:
        raise HFConversionError("GPT-2 configs with scale_attn_weights=false or scale_attn_by_inverse_layer_idx=true are not supported")
    if getattr(hf, "add_cross_attention", False):
        raise HFConversionError("GPT-2 with add_cross_attention=true is not supported")
    if hf.n_embd % hf.n_head:
        raise HFConversionError(f"GPT-2 n_embd {hf.n_embd} is not divisible by n_head {hf.n_head}")
    return TransformerConfig(
        vocab_size=hf.vocab_size,
        d_model=hf.n_embd,
        n_layers=hf.n_layer,
        n_heads=hf.n_head,
        d_mlp=hf.n_inner or 4 * hf.n_embd,
        mlp=_ACT_IN[act],
        norm="layernorm",
        norm_eps=hf.layer_norm_epsilon,
        attn_mask="causal",
        positions="learned",
        max_seq_len=hf.n_positions,
        bias=True,
        tie_embeddings=bool(getattr(hf, "tie_word_embeddings", True)),
    )


def load_gpt2(path: str | Path, dtype: torch.dtype = torch.float32) -> Transformer:
    """Transformer with the weights of the HF GPT-2 saved in local directory ``path``."""
    from transformers import GPT2Config

    path = Path(path)
    # clear errors for a missing / non-GPT-2 folder first; the dict -> GPT2Config (its defaults), no hub logic
    cfg = gpt2_config_to_ours(GPT2Config.from_dict(_read_config(path)))
    sd = _read_weights(path)
    D, L = cfg.d_model, cfg.n_layers

    def get(key: str, shape: tuple[int, ...]) -> torch.Tensor:
        if key not in sd:
            raise HFConversionError(f"weight {key!r} missing from {path} (is this a GPT-2 checkpoint?)")
        t = sd[key]
        if tuple(t.shape) != shape:
            raise HFConversionError(f"weight {key!r} in {path} has shape {tuple(t.shape)}, config implies {shape}")
        return t

    M = cfg.d_mlp
    ours: dict[str, torch.Tensor] = {
        "tok_emb.weight": get("wte.weight", (cfg.vocab_size, D)),
        "pos_emb.weight": get("wpe.weight", (cfg.max_seq_len, D)),
        "ln_final.weight": get("ln_f.weight", (D,)),
        "ln_final.bias": get("ln_f.bias", (D,)),
    }
    for i in range(L):
        h, b = f"h.{i}.", f"blocks.{i}."
        for hn, on in (("ln_1", "ln1"), ("ln_2", "ln2")):
            ours[b + on + ".weight"] = get(h + hn + ".weight", (D,))
            ours[b + on + ".bias"] = get(h + hn + ".bias", (D,))
        w = get(h + "attn.c_attn.weight", (D, 3 * D))
        bias = get(h + "attn.c_attn.bias", (3 * D,))
        for j, name in enumerate(("W_q", "W_k", "W_v")):
            ours[b + f"attn.{name}.weight"] = w[:, j * D:(j + 1) * D].T
            ours[b + f"attn.{name}.bias"] = bias[j * D:(j + 1) * D]
        ours[b + "attn.W_o.weight"] = get(h + "attn.c_proj.weight", (D, D)).T
        ours[b + "attn.W_o.bias"] = get(h + "attn.c_proj.bias", (D,))
        ours[b + "mlp.fc_in.weight"] = get(h + "mlp.c_fc.weight", (D, M)).T
        ours[b + "mlp.fc_in.bias"] = get(h + "mlp.c_fc.bias", (M,))
        ours[b + "mlp.fc_out.weight"] = get(h + "mlp.c_proj.weight", (M, D)).T
        ours[b + "mlp.fc_out.bias"] = get(h + "mlp.c_proj.bias", (D,))
    if cfg.tie_embeddings:
        ours["unembed.weight"] = ours["tok_emb.weight"]
    else:
        if "lm_head.weight" not in sd:
            raise HFConversionError(f"tie_word_embeddings is false but {path} has no lm_head.weight")
        ours["unembed.weight"] = get("lm_head.weight", (cfg.vocab_size, D))
    model = Transformer(cfg).to(dtype)  # cast before loading so float64 weights stay exact
    model.load_state_dict({k: v.contiguous() for k, v in ours.items()}, strict=True)
    return model.eval()


def _check_exportable(cfg: TransformerConfig) -> None:
    problems = []
    if cfg.positions != "learned":
        problems.append(f"positions={cfg.positions!r} (GPT-2 needs 'learned')")
    if cfg.norm != "layernorm":
        problems.append(f"norm={cfg.norm!r} (GPT-2 needs 'layernorm')")
    if cfg.attn_mask != "causal":
        problems.append(f"attn_mask={cfg.attn_mask!r} (GPT-2 is causal)")
    if not cfg.bias:
        problems.append("bias=False (GPT-2 has biases)")
    if cfg.d_mlp == 0:
        problems.append("d_mlp=0 (GPT-2 blocks have an MLP)")
    if cfg.mlp not in _ACT_OUT:
        problems.append(f"mlp={cfg.mlp!r} (GPT-2 supports {sorted(_ACT_OUT)})")
    if cfg.n_heads * cfg.d_head != cfg.d_model:
        problems.append(f"n_heads*d_head={cfg.n_heads * cfg.d_head} != d_model={cfg.d_model}")
    if cfg.n_out not in (0, cfg.vocab_size):
        problems.append(f"n_out={cfg.n_out} (GPT-2 outputs the vocabulary)")
    if problems:
        raise HFConversionError("model cannot be exported as GPT-2: " + "; ".join(problems))


def save_gpt2(model: Transformer, path: str | Path, bos_token_id: int | None = None,
              eos_token_id: int | None = None) -> Path:
    """Write ``model`` as a HF GPT-2 directory (config.json + model.safetensors, float32).

    The exported config has dropout 0 (dlmlab models train without dropout).
    """
    from transformers import GPT2Config

    cfg = model.cfg
    _check_exportable(cfg)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    D = cfg.d_model
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    tied = cfg.tie_embeddings and model.unembed.weight is model.tok_emb.weight
    out: dict[str, torch.Tensor] = {
        "transformer.wte.weight": sd["tok_emb.weight"],
        "transformer.wpe.weight": sd["pos_emb.weight"],
        "transformer.ln_f.weight": sd["ln_final.weight"],
        "transformer.ln_f.bias": sd["ln_final.bias"],
    }
    for i in range(cfg.n_layers):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        for hn, on in (("ln_1", "ln1"), ("ln_2", "ln2")):
            out[h + hn + ".weight"] = sd[b + on + ".weight"]
            out[h + hn + ".bias"] = sd[b + on + ".bias"]
        out[h + "attn.c_attn.weight"] = torch.cat([sd[b + f"attn.{n}.weight"].T for n in ("W_q", "W_k", "W_v")], dim=1)
        out[h + "attn.c_attn.bias"] = torch.cat([sd[b + f"attn.{n}.bias"] for n in ("W_q", "W_k", "W_v")])
        out[h + "attn.c_proj.weight"] = sd[b + "attn.W_o.weight"].T
        out[h + "attn.c_proj.bias"] = sd[b + "attn.W_o.bias"]
        out[h + "mlp.c_fc.weight"] = sd[b + "mlp.fc_in.weight"].T
        out[h + "mlp.c_fc.bias"] = sd[b + "mlp.fc_in.bias"]
        out[h + "mlp.c_proj.weight"] = sd[b + "mlp.fc_out.weight"].T
        out[h + "mlp.c_proj.bias"] = sd[b + "mlp.fc_out.bias"]
    if not tied:
        out["lm_head.weight"] = sd["unembed.weight"]
    hf = GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.max_seq_len, n_embd=D, n_layer=cfg.n_layers,
        n_head=cfg.n_heads, n_inner=cfg.d_mlp, activation_function=_ACT_OUT[cfg.mlp],
        layer_norm_epsilon=cfg.norm_eps, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        tie_word_embeddings=tied, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
        architectures=["GPT2LMHeadModel"],
    )
    hf.save_pretrained(str(path))
    save_file({k: v.contiguous() for k, v in out.items()}, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path
