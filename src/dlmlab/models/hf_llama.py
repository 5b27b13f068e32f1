"""Load a Llama-layout Hugging Face checkpoint (local folder) into a dlmlab :class:`Transformer`.

Llama / Mistral / Qwen2 (and Dream, which stores Qwen2's layout, see :mod:`hf_dream`) =
pre-RMSNorm, SwiGLU MLP, rotary positions (``rope_theta``, rotate-half layout as stored by HF),
untied unembedding unless ``tie_word_embeddings``.  Biases are read from the weights: q/k/v
biases alone (Qwen2, Dream) map to ``TransformerConfig.qkv_bias``; an output-projection or MLP
bias (Llama's ``attention_bias`` / ``mlp_bias``) turns on ``bias`` and the biases the checkpoint
lacks are zeros, which is the same function.  Grouped-query attention (``num_key_value_heads <
num_attention_heads``) is mapped onto the toolkit's multi-head attention by repeating each K/V
head's weights (and biases) for the query heads that share it, exactly what HF's ``repeat_kv``
does to the activations.

Mistral's ``sliding_window`` is not applied (the toolkit attends to every earlier position), so a
Mistral checkpoint is exact for sequences up to its window only.

Weight mapping: embed_tokens -> tok_emb, layers.i.input_layernorm / post_attention_layernorm ->
blocks.i.ln1 / ln2, self_attn.{q,k,v,o}_proj -> attn.W_{q,k,v,o}, mlp.gate_proj / up_proj /
down_proj -> mlp.fc_gate / fc_in / fc_out, norm -> ln_final, lm_head -> unembed.

Nothing is downloaded and no code from the folder runs (see :mod:`dlmlab.models.hf_files`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from dlmlab.models.config import TransformerConfig
from dlmlab.models.hf_files import HFFormatError, read_config, read_weights
from dlmlab.models.transformer import Transformer

LLAMA_TYPES = ("llama", "mistral", "qwen2")  # same layout; qwen2 additionally has q/k/v biases


def rope_theta(hf: dict) -> float:
    """The RoPE base of a HF config dict; only unscaled ("default") RoPE is supported."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise HFFormatError(f"rope scaling type {kind!r} is not supported by the dlmlab Llama loader (only default RoPE)")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def llama_config(hf: dict, *, attn_mask: str = "causal", qkv_bias: bool = False, bias: bool = False,
                 model_types: tuple[str, ...] = LLAMA_TYPES) -> TransformerConfig:
    """Map a HF Llama-layout ``config.json`` dict to a :class:`TransformerConfig` (HFFormatError on unsupported fields)."""
    mt = hf.get("model_type")
    if mt not in model_types:
        raise HFFormatError(f"config.json model_type is {mt!r}; the Llama loader handles {model_types}")
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise HFFormatError(f"hidden_act {act!r} is not supported (Llama uses silu / SwiGLU)")
    n_heads = int(hf["num_attention_heads"])
    n_kv = int(hf.get("num_key_value_heads") or n_heads)
    if n_heads % n_kv:
        raise HFFormatError(f"num_attention_heads {n_heads} is not a multiple of num_key_value_heads {n_kv}")
    d_model = int(hf["hidden_size"])
    d_head = int(hf.get("head_dim") or d_model // n_heads)
    return TransformerConfig(
        vocab_size=int(hf["vocab_size"]), d_model=d_model, n_layers=int(hf["num_hidden_layers"]),
        n_heads=n_heads, d_head=d_head, d_mlp=int(hf["intermediate_size"]), mlp="swiglu", norm="rmsnorm",
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)), attn_mask=attn_mask, positions="rope",
        rope_theta=rope_theta(hf), max_seq_len=int(hf.get("max_position_embeddings", 2048)), bias=bias,
        qkv_bias=qkv_bias, tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
    )


def repeat_kv_weight(w: torch.Tensor, n_kv: int, n_rep: int, d_head: int) -> torch.Tensor:
    """K/V projection weight [n_kv*d_head, D] (or bias [n_kv*d_head]) -> [n_kv*n_rep*d_head, ...];
    query head h uses kv head h // n_rep."""
    rest = w.shape[1:]
    return w.reshape(n_kv, 1, d_head, *rest).expand(n_kv, n_rep, d_head, *rest).reshape(n_kv * n_rep * d_head, *rest)


def build_transformer(cfg: TransformerConfig, state: dict[str, torch.Tensor], dtype: torch.dtype,
                      where: str) -> Transformer:
    """A :class:`Transformer` for ``cfg`` holding ``state`` (toolkit names) in ``dtype``.

    Checks names and shapes first (HFFormatError naming ``where``); missing biases are zeros; the
    model is built on the meta device and the tensors assigned, so a large checkpoint is never
    initialised at random or held twice in float32.
    """
    with torch.device("meta"):
        model = Transformer(cfg)
    expected = model.state_dict()
    tied = cfg.tie_embeddings and cfg.out_size == cfg.vocab_size
    if tied:
        state.pop("unembed.weight", None)
        expected.pop("unembed.weight")
    for k, v in state.items():
        if k not in expected:
            raise HFFormatError(f"internal mapping error: {k} is not a weight of the toolkit model")
        if tuple(expected[k].shape) != tuple(v.shape):
            raise HFFormatError(f"{where}: weight {k} has shape {tuple(v.shape)}, the config implies {tuple(expected[k].shape)}")
    missing = [k for k in expected if k not in state]
    if [k for k in missing if not k.endswith(".bias")]:
        raise HFFormatError(f"{where} lacks weights for {[k for k in missing if not k.endswith('.bias')][:5]}")
    full = {k: v.to(dtype).contiguous() for k, v in state.items()}
    full.update({k: torch.zeros(expected[k].shape, dtype=dtype) for k in missing})
    if tied:
        full["unembed.weight"] = full["tok_emb.weight"]
    model.load_state_dict(full, strict=True, assign=True)
    if tied:
        model.unembed.weight = model.tok_emb.weight
    return model.eval()


def llama_state(sd: dict[str, torch.Tensor], cfg: TransformerConfig, n_kv: int, where: str) -> dict[str, torch.Tensor]:
    """Toolkit weights from a Llama-layout state dict ``sd`` (HF names without the ``model.`` prefix; consumed)."""
    n_rep = cfg.n_heads // n_kv

    def take(name: str) -> torch.Tensor:
        if name not in sd:
            raise HFFormatError(f"{where} lacks weight {name!r}; is it a Llama-layout model?")
        return sd.pop(name)

    def kv(name: str) -> torch.Tensor:
        return repeat_kv_weight(take(name), n_kv, n_rep, cfg.d_head)

    new = {"tok_emb.weight": take("embed_tokens.weight"), "ln_final.weight": take("norm.weight")}
    for i in range(cfg.n_layers):
        p, q = f"layers.{i}.", f"blocks.{i}."
        new[q + "ln1.weight"] = take(p + "input_layernorm.weight")
        new[q + "ln2.weight"] = take(p + "post_attention_layernorm.weight")
        for hf_name, ours, fn in (("q_proj", "W_q", take), ("k_proj", "W_k", kv), ("v_proj", "W_v", kv),
                                  ("o_proj", "W_o", take)):
            new[q + f"attn.{ours}.weight"] = fn(p + f"self_attn.{hf_name}.weight")
            if p + f"self_attn.{hf_name}.bias" in sd:
                new[q + f"attn.{ours}.bias"] = fn(p + f"self_attn.{hf_name}.bias")
        for hf_name, ours in (("gate_proj", "fc_gate"), ("up_proj", "fc_in"), ("down_proj", "fc_out")):
            new[q + f"mlp.{ours}.weight"] = take(p + f"mlp.{hf_name}.weight")
            if p + f"mlp.{hf_name}.bias" in sd:
                new[q + f"mlp.{ours}.bias"] = take(p + f"mlp.{hf_name}.bias")
    head = sd.pop("lm_head.weight", None)
    if head is not None and not cfg.tie_embeddings:
        new["unembed.weight"] = head
    elif head is None and not cfg.tie_embeddings:
        raise HFFormatError(f"{where} has tie_word_embeddings=false but no lm_head.weight")
    leftover = [k for k in sd if not k.endswith("rotary_emb.inv_freq")]
    if leftover:
        raise HFFormatError(f"unexpected weights in {where}: {leftover[:5]} (not a plain Llama-layout checkpoint?)")
    return new


def biases_in(sd: dict[str, torch.Tensor]) -> tuple[bool, bool]:
    """(qkv_bias, bias) of a Llama-layout state dict: q/k/v biases alone, or biases elsewhere too."""
    qkv = any(k.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")) for k in sd)
    other = any(k.endswith(("o_proj.bias", "gate_proj.bias", "up_proj.bias", "down_proj.bias")) for k in sd)
    return qkv, other


def load_llama_layout(path: str | Path, dtype: torch.dtype = torch.float32, *, attn_mask: str = "causal",
                      model_types: tuple[str, ...] = LLAMA_TYPES) -> Transformer:
    """A local Llama-layout folder -> :class:`Transformer` with the given default ``attn_mask``."""
    path = Path(path)
    hf = read_config(path)
    if hf.get("model_type") not in model_types:  # before reading gigabytes of weights
        raise HFFormatError(f"config.json model_type is {hf.get('model_type')!r}; the Llama loader handles {model_types}")
    sd = {k.removeprefix("model."): v for k, v in read_weights(path).items()}
    qkv_bias, bias = biases_in(sd)
    cfg = llama_config(hf, attn_mask=attn_mask, qkv_bias=qkv_bias, bias=bias, model_types=model_types)
    n_kv = int(hf.get("num_key_value_heads") or cfg.n_heads)
    return build_transformer(cfg, llama_state(sd, cfg, n_kv, str(path)), dtype, str(path))


def load_llama(path: str | Path, dtype: torch.dtype = torch.float32) -> Transformer:
    """A local HF Llama / Mistral / Qwen2 folder -> toolkit :class:`Transformer` (causal, RoPE, SwiGLU, RMSNorm)."""
    return load_llama_layout(path, dtype)
