"""Load a LLaDA checkpoint (local folder) into a bidirectional dlmlab :class:`Transformer`.

LLaDA (``model_type`` "llada", ``LLaDAModelLM``) is an OLMo-style masked-diffusion model: pre-norm
blocks, RoPE on every head (``rope_theta``), no causal mask, mask token ``mask_token_id``
(126336 in the published 8B models).  Its parameter names (``model.transformer.`` prefix):

* ``wte`` -> tok_emb, ``ln_f`` -> ln_final, ``ff_out`` (absent when ``weight_tying``) -> unembed;
* ``blocks.i.`` (or ``block_groups.g.j.`` when ``block_group_size > 1``): ``attn_norm`` / ``ff_norm``
  -> ln1 / ln2, ``attn_out`` -> attn.W_o, ``ff_out`` -> mlp.fc_out, and

  - ``block_type`` "llama": ``q_proj`` / ``k_proj`` / ``v_proj`` -> attn.W_q / W_k / W_v;
    ``act(ff_proj(x)) * up_proj(x)`` with ``activation_type`` silu = SwiGLU with ``ff_proj`` ->
    mlp.fc_gate and ``up_proj`` -> mlp.fc_in;
  - ``block_type`` "sequential": fused ``att_proj`` = [q | k | v] rows; ``ff_proj`` with
    ``activation_type`` swiglu is [up | gate] rows (``x, gate = chunk(2)``, ``silu(gate) * x``);
    with gelu / relu a plain MLP (``ff_proj`` -> mlp.fc_in).

Grouped-query attention (``n_kv_heads``) repeats each K/V head for the query heads sharing it, as
LLaDA's ``repeat_interleave`` does.  Norms: ``layer_norm_type`` rms -> RMSNorm (``rms_norm_eps``),
gemma_rms -> RMSNorm with weight ``1 + w``, default / low_precision -> LayerNorm without bias
(eps 1e-5).  Refused with a one-line error: ALiBi or no RoPE, biases beyond q/k/v, QK-norm,
``input_emb_norm``, ``scale_logits``.  No code from the folder runs; nothing is downloaded.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from dlmlab.models.config import TransformerConfig
from dlmlab.models.hf_files import HFFormatError, mask_token_id, read_config, read_weights
from dlmlab.models.hf_llama import build_transformer, repeat_kv_weight
from dlmlab.models.transformer import Transformer

LLADA_MASK_ID = 126336  # the published LLaDA models' <|mdm_mask|> (used when config.json names none)
_GROUPED = re.compile(r"^block_groups\.(\d+)\.(\d+)\.")


def _kv_heads(hf: dict, n_heads: int) -> int:
    if hf.get("n_kv_heads") is not None:
        return int(hf["n_kv_heads"])
    return 1 if hf.get("multi_query_attention") else n_heads


def _refuse_unsupported(hf: dict) -> None:
    checks = [
        (hf.get("alibi", False), "alibi=true (LLaDA's masked-diffusion model requires RoPE)"),
        (not hf.get("rope", False), "rope=false (LLaDA's masked-diffusion model requires RoPE)"),
        (hf.get("include_bias", False), "include_bias=true (biases beyond q/k/v)"),
        (hf.get("bias_for_layer_norm"), "bias_for_layer_norm=true"),
        (hf.get("attention_layer_norm", False), "attention_layer_norm=true (QK-norm)"),
        (hf.get("input_emb_norm", False), "input_emb_norm=true"),
        (hf.get("scale_logits", False), "scale_logits=true"),
    ]
    bad = [why for cond, why in checks if cond]
    if bad:
        raise HFFormatError(f"LLaDA config not supported by the toolkit transformer: {'; '.join(bad)}")


def llada_config(hf: dict) -> TransformerConfig:
    """Map a LLaDA ``config.json`` dict to a bidirectional :class:`TransformerConfig`."""
    if str(hf.get("model_type", "")).lower() != "llada":
        raise HFFormatError(f"config.json model_type is {hf.get('model_type')!r}, not 'llada'")
    _refuse_unsupported(hf)
    d_model, n_heads = int(hf.get("d_model", 768)), int(hf.get("n_heads", 12))
    if d_model % n_heads:
        raise HFFormatError(f"LLaDA d_model {d_model} is not divisible by n_heads {n_heads}")
    n_kv = _kv_heads(hf, n_heads)
    if n_heads % n_kv:
        raise HFFormatError(f"LLaDA n_heads {n_heads} is not a multiple of n_kv_heads {n_kv}")
    hidden = int(hf.get("mlp_hidden_size") or int(hf.get("mlp_ratio", 4)) * d_model)
    block, act = hf.get("block_type", "sequential"), hf.get("activation_type", "swiglu")
    if block == "llama" and act == "silu":
        mlp, d_mlp = "swiglu", hidden
    elif block == "sequential" and act == "swiglu":
        mlp, d_mlp = "swiglu", hidden // 2
    elif block == "sequential" and act in ("gelu", "relu"):
        mlp, d_mlp = act, hidden
    else:
        raise HFFormatError(f"LLaDA block_type {block!r} with activation_type {act!r} is not supported "
                            "(llama+silu, sequential+swiglu/gelu/relu are)")
    norm_type = hf.get("layer_norm_type", "default")
    if norm_type in ("rms", "gemma_rms"):
        norm, eps = "rmsnorm", float(hf.get("rms_norm_eps", 1e-5))
    elif norm_type in ("default", "low_precision"):
        norm, eps = "layernorm", 1e-5
    else:
        raise HFFormatError(f"LLaDA layer_norm_type {norm_type!r} is not supported")
    return TransformerConfig(
        vocab_size=int(hf.get("embedding_size") or hf.get("vocab_size", 50257)), d_model=d_model,
        n_layers=int(hf.get("n_layers", 12)), n_heads=n_heads, d_head=d_model // n_heads, d_mlp=d_mlp, mlp=mlp,
        norm=norm, norm_eps=eps, attn_mask="bidirectional", positions="rope",
        rope_theta=float(hf.get("rope_theta", 10000.0)), max_seq_len=int(hf.get("max_sequence_length", 1024)),
        bias=False, qkv_bias=bool(hf.get("include_qkv_bias", False)),
        tie_embeddings=bool(hf.get("weight_tying", True)),
    )


def _ungroup(sd: dict[str, torch.Tensor], group_size: int) -> dict[str, torch.Tensor]:
    """Strip ``model.`` / ``transformer.`` and turn ``block_groups.g.j.`` into ``blocks.{g*size+j}.``."""
    out = {}
    for k, v in sd.items():
        k = k.removeprefix("model.").removeprefix("transformer.")
        m = _GROUPED.match(k)
        if m:
            k = f"blocks.{int(m[1]) * group_size + int(m[2])}." + k[m.end():]
        out[k] = v
    return out


def llada_state(sd: dict[str, torch.Tensor], hf: dict, cfg: TransformerConfig, where: str) -> dict[str, torch.Tensor]:
    """Toolkit weights from a LLaDA state dict (names without the ``model.transformer.`` prefix; consumed)."""
    n_kv = _kv_heads(hf, cfg.n_heads)
    n_rep, dh, D = cfg.n_heads // n_kv, cfg.d_head, cfg.d_model
    gemma = hf.get("layer_norm_type") == "gemma_rms"
    affine = hf.get("layer_norm_with_affine", True)

    def take(name: str) -> torch.Tensor:
        if name not in sd:
            raise HFFormatError(f"{where} lacks weight {name!r}; is it a LLaDA checkpoint?")
        return sd.pop(name)

    def norm(name: str) -> torch.Tensor:
        w = take(name) if affine else torch.ones(D)
        return w + 1 if gemma and affine else w

    new = {"tok_emb.weight": take("wte.weight"), "ln_final.weight": norm("ln_f.weight")}
    for i in range(cfg.n_layers):
        p, q = f"blocks.{i}.", f"blocks.{i}."
        new[q + "ln1.weight"] = norm(p + "attn_norm.weight")
        new[q + "ln2.weight"] = norm(p + "ff_norm.weight")
        new[q + "attn.W_o.weight"] = take(p + "attn_out.weight")
        new[q + "mlp.fc_out.weight"] = take(p + "ff_out.weight")
        if hf.get("block_type", "sequential") == "llama":
            parts = {n: take(p + f"{n}_proj.weight") for n in "qkv"}
            biases = {n: take(p + f"{n}_proj.bias") for n in "qkv"} if cfg.qkv_bias else {}
            new[q + "mlp.fc_gate.weight"] = take(p + "ff_proj.weight")
            new[q + "mlp.fc_in.weight"] = take(p + "up_proj.weight")
        else:
            sizes = [D, n_kv * dh, n_kv * dh]
            parts = dict(zip("qkv", take(p + "att_proj.weight").split(sizes, dim=0)))
            biases = dict(zip("qkv", take(p + "att_proj.bias").split(sizes))) if cfg.qkv_bias else {}
            ff = take(p + "ff_proj.weight")
            if cfg.mlp == "swiglu":
                new[q + "mlp.fc_in.weight"], new[q + "mlp.fc_gate.weight"] = ff.chunk(2, dim=0)
            else:
                new[q + "mlp.fc_in.weight"] = ff
        for n, t in parts.items():
            new[q + f"attn.W_{n}.weight"] = t if n == "q" else repeat_kv_weight(t, n_kv, n_rep, dh)
        for n, t in biases.items():
            new[q + f"attn.W_{n}.bias"] = t if n == "q" else repeat_kv_weight(t, n_kv, n_rep, dh)
    if not cfg.tie_embeddings:
        new["unembed.weight"] = take("ff_out.weight")
    leftover = list(sd)
    if leftover:
        raise HFFormatError(f"unexpected weights in {where}: {leftover[:5]} (not a LLaDA checkpoint of this config?)")
    return new


def load_llada(path: str | Path, dtype: torch.dtype = torch.float32) -> tuple[Transformer, int]:
    """A local LLaDA folder -> (bidirectional :class:`Transformer`, mask token id)."""
    path = Path(path)
    hf = read_config(path)
    cfg = llada_config(hf)
    mask_id = mask_token_id(path, hf, LLADA_MASK_ID, cfg.vocab_size, "LLaDA")
    sd = _ungroup(read_weights(path), int(hf.get("block_group_size", 1)))
    return build_transformer(cfg, llada_state(sd, hf, cfg, str(path)), dtype, str(path)), mask_id
