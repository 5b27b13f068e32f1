"""TransformerLens's HookedTransformer with a dlmlab Transformer's weights (float64), for the idiom tests."""

from __future__ import annotations

import torch


def tl_twin(m):
    """A ``transformer_lens.HookedTransformer`` computing what the dlmlab Transformer ``m`` computes (learned or
    rotary positions; LayerNorm or RMSNorm; GELU-tanh MLP), built from ``m``'s TransformerLens weight views."""
    import transformer_lens as tl  # the `tl` extra (in the lock): a missing install fails here, it does not skip

    assert hasattr(tl, "HookedTransformer"), "TransformerLens 3.x is needed (4.0 removed HookedTransformer)"
    c = m.cfg
    rotary = {"positional_embedding_type": "rotary", "rotary_dim": c.d_head, "rotary_base": int(c.rope_theta)} \
        if c.positions == "rope" else {}
    norm = {"layernorm": "LN", "rmsnorm": "RMS"}[c.norm]
    cfg = tl.HookedTransformerConfig(n_layers=c.n_layers, d_model=c.d_model, n_ctx=c.max_seq_len, d_head=c.d_head,
                                     n_heads=c.n_heads, d_mlp=c.d_mlp, d_vocab=c.vocab_size, act_fn="gelu_new",
                                     normalization_type=norm, eps=c.norm_eps, dtype=torch.float64,
                                     default_prepend_bos=False, **rotary)
    ref = tl.HookedTransformer(cfg).eval()
    sd = {"embed.W_E": m.W_E, "unembed.W_U": m.W_U, "unembed.b_U": m.b_U}
    norms = [("ln_final", m.ln_final)] + [(f"blocks.{i}.{n}", getattr(b, n)) for i, b in enumerate(m.blocks)
                                          for n in ("ln1", "ln2")]
    for name, ln in norms:
        sd[f"{name}.w"] = ln.weight
        if norm == "LN":
            sd[f"{name}.b"] = ln.bias
    if c.positions == "learned":
        sd["pos_embed.W_pos"] = m.W_pos
    for i in range(c.n_layers):
        for n in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
            sd[f"blocks.{i}.attn.{n}"] = getattr(m, n)[i]
        for n in ("W_in", "b_in", "W_out", "b_out"):
            sd[f"blocks.{i}.mlp.{n}"] = getattr(m, n)[i]
    missing, _ = ref.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=False)
    assert not [k for k in missing if not k.endswith(("IGNORE", "mask", "rotary_sin", "rotary_cos"))], missing
    return ref
