"""LLaDA and Dream loaders vs transformers' Llama / Qwen2 run bidirectionally, on tiny random weights.

Each test writes its own checkpoint (config.json + model.safetensors in tmp_path; nothing is
downloaded, no remote code): LLaDA's parameter names hold the weights of a ``LlamaForCausalLM``
(or ``Qwen2ForCausalLM`` for q/k/v biases), Dream's Qwen2 layout those of a ``Qwen2ForCausalLM``.
The peer runs with a full bidirectional 4-D attention mask (all-zeros additive float mask
[B,1,T,T], which transformers 5 passes through unchanged); the logits and every residual point
(embed, resid_pre, resid_mid, resid_post, final) must agree within 1e-5 (float64).
"""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
from safetensors.torch import save_file  # noqa: E402

from dlmlab.errors import UserError  # noqa: E402
from dlmlab.models.hf_auto import load_hf  # noqa: E402
from dlmlab.models.hf_dream import align_logits  # noqa: E402
from llada_format import llada_config, llada_weights  # noqa: E402

V, T, TOL = 97, 11, 1e-5
TOKENS = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))


def _peer(kind: str, **kw):
    """A tiny random LlamaForCausalLM / Qwen2ForCausalLM in float64 with non-trivial norms and biases."""
    args = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, rope_theta=5000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False, attn_implementation="eager")
    args.update(kw)
    torch.manual_seed(0)
    cls, cfg = ((transformers.LlamaForCausalLM, transformers.LlamaConfig) if kind == "llama"
                else (transformers.Qwen2ForCausalLM, transformers.Qwen2Config))
    hf = cls(cfg(**args))
    with torch.no_grad():  # norms and biases away from their init so a wrong mapping cannot hide
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
    return hf.double().eval()


def _hf_points(hf, tokens: torch.Tensor, bidirectional: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Logits and residual points of a HF Llama-layout model via forward hooks (toolkit names)."""
    points: dict[str, torch.Tensor] = {}
    handles = [hf.model.embed_tokens.register_forward_hook(lambda m, a, o: points.__setitem__("embed", o)),
               hf.model.norm.register_forward_hook(lambda m, a, o: points.__setitem__("final", o))]
    for i, layer in enumerate(hf.model.layers):
        def pre(name):
            return lambda m, a: points.__setitem__(name, a[0])
        handles.append(layer.input_layernorm.register_forward_pre_hook(pre(f"blocks.{i}.resid_pre")))
        handles.append(layer.post_attention_layernorm.register_forward_pre_hook(pre(f"blocks.{i}.resid_mid")))
        handles.append(layer.register_forward_hook(
            lambda m, a, o, i=i: points.__setitem__(f"blocks.{i}.resid_post", o[0] if isinstance(o, tuple) else o)))
    B, n = tokens.shape
    mask = torch.zeros(B, 1, n, n, dtype=torch.float64) if bidirectional else None
    try:
        with torch.no_grad():
            logits = hf(tokens, attention_mask=mask).logits
    finally:
        for h in handles:
            h.remove()
    return logits, points


def _assert_same(ours, hf, bidirectional: bool, tokens: torch.Tensor = TOKENS) -> None:
    ref, ref_points = _hf_points(hf, tokens, bidirectional)
    names = ["embed", "final"] + [f"blocks.{i}.{p}" for i in range(ours.cfg.n_layers)
                                  for p in ("resid_pre", "resid_mid", "resid_post")]
    assert set(ref_points) == set(names)
    with torch.no_grad(), ours.cache(names) as cache:
        got = ours(tokens)
    assert (got - ref).abs().max().item() < TOL
    for name in names:
        assert (cache[name] - ref_points[name]).abs().max().item() < TOL, name


# --- LLaDA ------------------------------------------------------------------------------------
def _llada_config(hf, **kw) -> dict:
    return llada_config(hf.config, **{"rope_theta": 5000.0, **kw})


_llada_weights = llada_weights


def _write(path, config: dict, weights: dict[str, torch.Tensor], **files: str):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    for name, text in files.items():
        (path / name.replace("__", ".")).write_text(text)
    return path


@pytest.mark.parametrize("peer,kv,tied", [("llama", 2, False), ("llama", 4, True), ("qwen2", 1, False)])
def test_llada_matches_peer_bidirectional(tmp_path, peer, kv, tied):
    hf = _peer(peer, num_key_value_heads=kv, tie_word_embeddings=tied)
    cfg = _llada_config(hf, include_qkv_bias=peer == "qwen2")
    # a modeling file that would leave a trace if any code from the folder ran
    trap = f"open({str(tmp_path / 'EXECUTED')!r}, 'w').write('remote code ran')\n"
    model, info = load_hf(_write(tmp_path / "llada", cfg, _llada_weights(hf), modeling_llada__py=trap),
                          dtype=torch.float64)
    assert not (tmp_path / "EXECUTED").exists()
    assert (info.format, info.family, info.objective, info.mask_id) == ("llada", "transformer", "mdm", V - 1)
    assert info.bidirectional and not info.shift_logits and info.tokenizer_path is None
    assert model.cfg.attn_mask == "bidirectional" and model.cfg.tie_embeddings is tied
    assert model.cfg.qkv_bias is (peer == "qwen2") and model.cfg.rope_theta == 5000.0
    _assert_same(model, hf, bidirectional=True)


def test_llada_sequential_fused_block_groups_equal_llama_block(tmp_path):
    hf = _peer("llama")
    ref, _ = load_hf(_write(tmp_path / "a", _llada_config(hf), _llada_weights(hf)), dtype=torch.float64)
    seq_cfg = _llada_config(hf, block_type="sequential", activation_type="swiglu",
                            mlp_hidden_size=2 * hf.config.intermediate_size, block_group_size=2)
    got, _ = load_hf(_write(tmp_path / "b", seq_cfg, _llada_weights(hf, fused=True, group=2)), dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(got(TOKENS), ref(TOKENS), atol=1e-12, rtol=0)


def test_llada_refuses_what_the_transformer_cannot_run(tmp_path):
    hf = _peer("llama")
    for bad, msg in [({"alibi": True, "rope": False}, "alibi"), ({"scale_logits": True}, "scale_logits"),
                     ({"attention_layer_norm": True}, "QK-norm"), ({"block_type": "llama", "activation_type": "gelu"},
                                                                    "activation_type 'gelu'")]:
        d = _write(tmp_path / msg.split()[0], _llada_config(hf, **bad), _llada_weights(hf))
        with pytest.raises(UserError, match=msg):
            load_hf(d)
    d = _write(tmp_path / "nomask", _llada_config(hf, mask_token_id=None), _llada_weights(hf))
    with pytest.raises(UserError, match="mask token id 126336"):  # the published id does not fit this vocabulary
        load_hf(d)
    w = _llada_weights(hf)
    w.pop("model.transformer.blocks.1.up_proj.weight")
    with pytest.raises(UserError, match="up_proj"):
        load_hf(_write(tmp_path / "missing", _llada_config(hf), w))


# --- Dream and Qwen2 --------------------------------------------------------------------------
def _dream_folder(tmp_path, hf, mask_in_generation_config: bool):
    hf.float().save_pretrained(tmp_path)
    hf.double()
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(model_type="Dream", architectures=["DreamModel"],
               auto_map={"AutoModel": "modeling_dream.DreamModel"})
    if mask_in_generation_config:
        gen = json.loads((tmp_path / "generation_config.json").read_text()) if (
            tmp_path / "generation_config.json").exists() else {}
        (tmp_path / "generation_config.json").write_text(json.dumps({**gen, "mask_token_id": V - 2}))
    else:
        cfg["mask_token_id"] = V - 2
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "modeling_dream.py").write_text(f"open({str(tmp_path / 'EXECUTED')!r}, 'w')\n")
    return tmp_path


@pytest.mark.parametrize("kv,in_gen", [(2, False), (4, True)])
def test_dream_matches_qwen2_bidirectional(tmp_path, kv, in_gen):
    hf = _peer("qwen2", num_key_value_heads=kv)
    model, info = load_hf(_dream_folder(tmp_path, hf, in_gen), dtype=torch.float64)
    assert not (tmp_path / "EXECUTED").exists()
    assert (info.format, info.objective, info.mask_id, info.shift_logits, info.bidirectional) == (
        "dream", "mdm", V - 2, True, True)
    assert model.cfg.qkv_bias and not model.cfg.bias and model.cfg.attn_mask == "bidirectional"
    _assert_same(model, hf, bidirectional=True)
    with torch.no_grad():
        out = model(TOKENS)
    aligned = align_logits(out)
    torch.testing.assert_close(aligned[:, 1:], out[:, :-1])
    torch.testing.assert_close(aligned[:, 0], out[:, 0])


def test_qwen2_causal_matches_hf(tmp_path):
    hf = _peer("qwen2")
    hf.float().save_pretrained(tmp_path)
    hf.double()
    model, info = load_hf(tmp_path, dtype=torch.float64)
    assert (info.format, info.objective, info.bidirectional, info.mask_id) == ("qwen2", "ar", False, None)
    assert model.cfg.qkv_bias and model.cfg.attn_mask == "causal"
    _assert_same(model, hf, bidirectional=False)


def test_llama_attention_and_mlp_biases_match_hf(tmp_path):
    hf = _peer("llama", attention_bias=True, mlp_bias=True)
    hf.float().save_pretrained(tmp_path)
    hf.double()
    model, _ = load_hf(tmp_path, dtype=torch.float64)
    assert model.cfg.bias
    _assert_same(model, hf, bidirectional=False)
