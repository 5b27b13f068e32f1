"""Load a Llama-family Hugging Face checkpoint (local directory) into a dlmlab :class:`Transformer`.

Llama = pre-RMSNorm, SwiGLU MLP, rotary positions (``rope_theta``, rotate-half
layout as stored by HF), no biases, untied unembedding (unless
``tie_word_embeddings``).  Grouped-query attention (``num_key_value_heads <
num_attention_heads``) is mapped onto the toolkit's multi-head attention by
repeating each K/V head's weights for the query heads that share it, which is
exactly what HF's ``repeat_kv`` does to the activations.

Nothing is downloaded: ``path`` must be a local directory holding ``config.json``
and ``model.safetensors`` (or sharded ``model-*.safetensors`` with an index);
pickled ``pytorch_model.bin`` files are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dlmlab.models.config import TransformerConfig
from dlmlab.models.transformer import Transformer

LLAMA_TYPES = ("llama", "mistral", "qwen2")  # same layout; qwen2 additionally has q/k/v biases


def _read_config(path: Path) -> dict:
    cfg_path = path / "config.json"
    if not path.is_dir():
        raise FileNotFoundError(f"Llama checkpoint directory not found: {path}")
    if not cfg_path.exists():
        raise FileNotFoundError(f"{path} has no config.json (expected a Hugging Face model directory)")
    return json.loads(cfg_path.read_text())


def _rope_theta(hf: dict) -> float:
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise ValueError(f"rope scaling type {kind!r} is not supported by the dlmlab Llama loader (only default RoPE)")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def llama_config(hf: dict) -> TransformerConfig:
    """Map a HF Llama ``config.json`` dict to a :class:`TransformerConfig` (raises ValueError on unsupported fields)."""
    mt = hf.get("model_type")
    if mt not in LLAMA_TYPES:
        raise ValueError(f"config.json model_type is {mt!r}; the Llama loader handles {LLAMA_TYPES}")
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"hidden_act {act!r} is not supported (Llama uses silu / SwiGLU)")
    if hf.get("mlp_bias", False):
        raise ValueError("mlp_bias=True is not supported by the toolkit transformer")
    attn_bias = bool(hf.get("attention_bias", mt == "qwen2"))
    if attn_bias:
        raise ValueError("attention biases (attention_bias=True / qwen2) are not supported by the toolkit transformer")
    n_heads = int(hf["num_attention_heads"])
    n_kv = int(hf.get("num_key_value_heads") or n_heads)
    if n_heads % n_kv:
        raise ValueError(f"num_attention_heads {n_heads} is not a multiple of num_key_value_heads {n_kv}")
    d_model = int(hf["hidden_size"])
    d_head = int(hf.get("head_dim") or d_model // n_heads)
    return TransformerConfig(
        vocab_size=int(hf["vocab_size"]), d_model=d_model, n_layers=int(hf["num_hidden_layers"]),
        n_heads=n_heads, d_head=d_head, d_mlp=int(hf["intermediate_size"]), mlp="swiglu", norm="rmsnorm",
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)), attn_mask="causal", positions="rope",
        rope_theta=_rope_theta(hf), max_seq_len=int(hf.get("max_position_embeddings", 2048)), bias=False,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
    )


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    single = path / "model.safetensors"
    if single.exists():
        return load_file(str(single))
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        sd: dict[str, torch.Tensor] = {}
        for f in files:
            sd.update(load_file(str(path / f)))
        return sd
    if (path / "pytorch_model.bin").exists():
        raise ValueError(f"{path} only has pytorch_model.bin (a pickle, which dlmlab never loads); convert it once "
                         "with LlamaForCausalLM.from_pretrained(path).save_pretrained(path, safe_serialization=True)")
    raise FileNotFoundError(f"{path} holds no model.safetensors or model.safetensors.index.json")


def repeat_kv_weight(w: torch.Tensor, n_kv: int, n_rep: int, d_head: int) -> torch.Tensor:
    """K/V projection weight [n_kv*d_head, D] -> [n_kv*n_rep*d_head, D]; query head h uses kv head h // n_rep."""
    D = w.shape[1]
    return w.view(n_kv, 1, d_head, D).expand(n_kv, n_rep, d_head, D).reshape(n_kv * n_rep * d_head, D)


def load_llama(path: str | Path, dtype: torch.dtype = torch.float32) -> Transformer:
    """A local HF Llama-family directory -> toolkit :class:`Transformer` (causal, RoPE, SwiGLU, RMSNorm)."""
    path = Path(path)
    hf = _read_config(path)
    cfg = llama_config(hf)
    sd = {k.removeprefix("model."): v for k, v in _read_weights(path).items()}
    n_kv = int(hf.get("num_key_value_heads") or cfg.n_heads)
    n_rep = cfg.n_heads // n_kv

    def take(name: str) -> torch.Tensor:
        if name not in sd:
            raise ValueError(f"checkpoint in {path} lacks weight {name!r}; is it a Llama-family model?")
        return sd.pop(name)

    new: dict[str, torch.Tensor] = {"tok_emb.weight": take("embed_tokens.weight"), "ln_final.weight": take("norm.weight")}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        q = f"blocks.{i}."
        new[q + "ln1.weight"] = take(p + "input_layernorm.weight")
        new[q + "ln2.weight"] = take(p + "post_attention_layernorm.weight")
        new[q + "attn.W_q.weight"] = take(p + "self_attn.q_proj.weight")
        new[q + "attn.W_k.weight"] = repeat_kv_weight(take(p + "self_attn.k_proj.weight"), n_kv, n_rep, cfg.d_head)
        new[q + "attn.W_v.weight"] = repeat_kv_weight(take(p + "self_attn.v_proj.weight"), n_kv, n_rep, cfg.d_head)
        new[q + "attn.W_o.weight"] = take(p + "self_attn.o_proj.weight")
        new[q + "mlp.fc_gate.weight"] = take(p + "mlp.gate_proj.weight")
        new[q + "mlp.fc_in.weight"] = take(p + "mlp.up_proj.weight")
        new[q + "mlp.fc_out.weight"] = take(p + "mlp.down_proj.weight")
    head = sd.pop("lm_head.weight", None)
    if cfg.tie_embeddings:
        head = None
    elif head is None:
        raise ValueError(f"checkpoint in {path} has tie_word_embeddings=False but no lm_head.weight")
    if head is not None:
        new["unembed.weight"] = head
    leftover = [k for k in sd if not k.endswith("rotary_emb.inv_freq")]
    if leftover:
        raise ValueError(f"unexpected weights in {path}: {leftover[:5]} (not a plain Llama checkpoint?)")
    model = Transformer(cfg)
    expected = model.state_dict()
    for k, v in new.items():
        if k not in expected:
            raise ValueError(f"internal mapping error: {k} not in the toolkit model")
        if tuple(expected[k].shape) != tuple(v.shape):
            raise ValueError(f"weight {k}: checkpoint shape {tuple(v.shape)} != expected {tuple(expected[k].shape)}")
    missing = set(expected) - set(new) - ({"unembed.weight"} if cfg.tie_embeddings else set())
    if missing:
        raise ValueError(f"checkpoint in {path} lacks weights for {sorted(missing)[:5]}")
    model.load_state_dict({k: v.to(torch.float32) for k, v in new.items()}, strict=False)
    return model.to(dtype).eval()
