"""LLaDA's published checkpoint format, written from a transformers Llama / Qwen2 model (tests only).

:func:`llada_config` is LLaDA's config.json for the peer's shape; :func:`llada_weights` the peer's
weights under LLaDA's parameter names (the llama block, or the sequential block's fused matrices
in block groups).  Shared by the loader tests and the reversal fine-tuning tests.
"""

from __future__ import annotations

import torch


def llada_config(c, **kw) -> dict:
    """LLaDA's config.json (dict) for a transformers Llama / Qwen2 config ``c``; ``kw`` overrides fields."""
    cfg = {"model_type": "llada", "architectures": ["LLaDAModelLM"], "d_model": c.hidden_size,
           "n_heads": c.num_attention_heads, "n_kv_heads": c.num_key_value_heads, "n_layers": c.num_hidden_layers,
           "mlp_hidden_size": c.intermediate_size, "mlp_ratio": 4, "activation_type": "silu", "block_type": "llama",
           "block_group_size": 1, "layer_norm_type": "rms", "rms_norm_eps": c.rms_norm_eps, "rope": True,
           "rope_theta": 10000.0, "alibi": False, "include_bias": False, "include_qkv_bias": False,
           "bias_for_layer_norm": False, "attention_layer_norm": False, "input_emb_norm": False,
           "scale_logits": False, "weight_tying": bool(c.tie_word_embeddings), "vocab_size": c.vocab_size,
           "embedding_size": c.vocab_size, "max_sequence_length": 64, "mask_token_id": c.vocab_size - 1,
           "auto_map": {"AutoModel": "modeling_llada.LLaDAModelLM"}}
    cfg.update(kw)
    return cfg


def llada_weights(hf, fused: bool = False, group: int = 1) -> dict[str, torch.Tensor]:
    """The peer's weights under LLaDA's names (llama block, or the sequential block's fused matrices)."""
    sd = {k: v.float() for k, v in hf.state_dict().items()}
    pre = "model.transformer."
    out = {pre + "wte.weight": sd["model.embed_tokens.weight"], pre + "ln_f.weight": sd["model.norm.weight"]}
    if not hf.config.tie_word_embeddings:
        out[pre + "ff_out.weight"] = sd["lm_head.weight"]
    for i in range(hf.config.num_hidden_layers):
        p = f"model.layers.{i}."
        b = pre + (f"block_groups.{i // group}.{i % group}." if group > 1 else f"blocks.{i}.")
        out[b + "attn_norm.weight"] = sd[p + "input_layernorm.weight"]
        out[b + "ff_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
        out[b + "attn_out.weight"] = sd[p + "self_attn.o_proj.weight"]
        out[b + "ff_out.weight"] = sd[p + "mlp.down_proj.weight"]
        qkv = [sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]
        bias = [sd[p + f"self_attn.{n}_proj.bias"] for n in "qkv" if p + f"self_attn.{n}_proj.bias" in sd]
        if fused:
            out[b + "att_proj.weight"] = torch.cat(qkv)
            if bias:
                out[b + "att_proj.bias"] = torch.cat(bias)
            out[b + "ff_proj.weight"] = torch.cat([sd[p + "mlp.up_proj.weight"], sd[p + "mlp.gate_proj.weight"]])
        else:
            for n, w in zip("qkv", qkv):
                out[b + f"{n}_proj.weight"] = w
            for n, w in zip("qkv", bias):
                out[b + f"{n}_proj.bias"] = w
            out[b + "ff_proj.weight"] = sd[p + "mlp.gate_proj.weight"]
            out[b + "up_proj.weight"] = sd[p + "mlp.up_proj.weight"]
    return {k: v.contiguous() for k, v in out.items()}
