"""load_hf: one call dispatches every Hugging Face folder format to its loader; clear errors otherwise.

Every folder is written by the test itself from a tiny random transformers model (no download).
The per-format numerical equivalence lives beside each loader (test_hf_gpt2, test_hf_llama,
test_models_mamba*, test_hf_hooked, test_hf_llada_dream); here: the right model class, HFInfo and
a forward pass with the checkpoint's logits.
"""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from dlmlab.errors import UserError  # noqa: E402
from dlmlab.models.hf_auto import SUPPORTED, HFInfo, load_hf  # noqa: E402
from dlmlab.models.hf_files import read_weights  # noqa: E402

V = 40


def _save(kind: str, path):
    """A tiny random HF model of ``kind`` saved to ``path``; returns it (eval, float32)."""
    torch.manual_seed(0)
    t = transformers
    small = dict(vocab_size=V, num_hidden_layers=2)
    if kind == "gpt2":
        hf = t.GPT2LMHeadModel(t.GPT2Config(vocab_size=V, n_layer=2, n_embd=16, n_head=2, n_positions=32,
                                            bos_token_id=0, eos_token_id=0))
    elif kind in ("llama", "qwen2", "mistral"):
        cls = {"llama": (t.LlamaForCausalLM, t.LlamaConfig), "qwen2": (t.Qwen2ForCausalLM, t.Qwen2Config),
               "mistral": (t.MistralForCausalLM, t.MistralConfig)}[kind]
        hf = cls[0](cls[1](hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1,
                           max_position_embeddings=32, **small))
    elif kind == "gpt_neox":
        hf = t.GPTNeoXForCausalLM(t.GPTNeoXConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32,
                                                  max_position_embeddings=32, **small))
    elif kind == "mamba":
        hf = t.MambaForCausalLM(t.MambaConfig(hidden_size=16, state_size=4, expand=2, use_cache=False, **small))
    elif kind == "mamba2":
        hf = t.Mamba2ForCausalLM(t.Mamba2Config(hidden_size=16, state_size=4, expand=2, head_dim=8, num_heads=4,
                                                n_groups=1, chunk_size=8, use_cache=False, **small))
    elif kind in ("llada", "dream"):
        hf = t.Qwen2ForCausalLM(t.Qwen2Config(hidden_size=16, intermediate_size=24, num_attention_heads=2,
                                              num_key_value_heads=1, max_position_embeddings=32, **small))
    hf.eval().save_pretrained(path)
    if kind == "dream":
        cfg = json.loads((path / "config.json").read_text())
        cfg.update(model_type="Dream", architectures=["DreamModel"], mask_token_id=V - 1)
        (path / "config.json").write_text(json.dumps(cfg))
    elif kind == "llada":  # rename the Qwen2 weights into LLaDA's names
        from safetensors.torch import save_file

        sd = read_weights(path)
        names = {"model.embed_tokens": "wte", "model.norm": "ln_f", "lm_head": "ff_out", "input_layernorm": "attn_norm",
                 "post_attention_layernorm": "ff_norm", "self_attn.o_proj": "attn_out", "self_attn.": "",
                 "mlp.gate_proj": "ff_proj", "mlp.up_proj": "up_proj", "mlp.down_proj": "ff_out", "model.layers": "blocks"}
        out = {}
        for k, v in sd.items():
            for a, b in names.items():
                k = k.replace(a, b)
            out["model.transformer." + k] = v.contiguous()
        (path / "model.safetensors").unlink()
        save_file(out, str(path / "model.safetensors"))
        c = hf.config
        (path / "config.json").write_text(json.dumps({
            "model_type": "llada", "d_model": 16, "n_heads": 2, "n_kv_heads": 1, "n_layers": 2, "mlp_hidden_size": 24,
            "activation_type": "silu", "block_type": "llama", "layer_norm_type": "rms", "rms_norm_eps": c.rms_norm_eps,
            "rope": True, "rope_theta": 10000.0, "include_qkv_bias": True, "weight_tying": False, "vocab_size": V,
            "embedding_size": V, "mask_token_id": V - 1}))
    return hf


EXPECT = {  # format -> (model class name, family, objective, bidirectional, shift_logits)
    "gpt2": ("Transformer", "transformer", "ar", False, False),
    "llama": ("Transformer", "transformer", "ar", False, False),
    "mistral": ("Transformer", "transformer", "ar", False, False),
    "qwen2": ("Transformer", "transformer", "ar", False, False),
    "gpt_neox": ("HFHooked", "transformer", "ar", False, False),
    "mamba": ("Mamba", "mamba", "ar", False, False),
    "mamba2": ("Mamba2", "mamba2", "ar", False, False),
    "llada": ("Transformer", "transformer", "mdm", True, False),
    "dream": ("Transformer", "transformer", "mdm", True, True),
}


def test_expectations_cover_every_supported_format():
    assert set(EXPECT) == set(SUPPORTED)


@pytest.mark.parametrize("fmt", list(EXPECT))
def test_load_hf_dispatches_every_format(tmp_path, fmt):
    if fmt == "gpt_neox":
        pytest.importorskip("dlmlab.models.hf_hooked", reason="GPT-NeoX loads through hf_hooked (helper H2)")
    hf = _save(fmt, tmp_path)
    model, info = load_hf(tmp_path)
    cls, family, objective, bidirectional, shift = EXPECT[fmt]
    assert isinstance(info, HFInfo) and type(model).__name__ == cls
    assert (info.format, info.family, info.objective, info.bidirectional, info.shift_logits) == (
        fmt, family, objective, bidirectional, shift)
    assert info.mask_id == (V - 1 if objective == "mdm" else None)
    assert info.tokenizer_path is None
    with pytest.raises(Exception):  # frozen
        info.format = "x"
    tokens = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = model(tokens)
        assert got.shape == (2, 9, V) and got.dtype == torch.float32
        if not bidirectional and fmt != "mamba2":  # the AR peers' own forward (Mamba-2 is checked in its own test)
            assert (got - hf(tokens).logits).abs().max().item() < 1e-4


def test_dtype_and_tokenizer_path(tmp_path):
    _save("llama", tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    model, info = load_hf(tmp_path, dtype=torch.float64)
    assert info.tokenizer_path == str(tmp_path)
    assert all(p.dtype == torch.float64 for p in model.parameters())


def test_format_from_architectures_when_model_type_is_missing(tmp_path):
    _save("qwen2", tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["model_type"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="has no model_type; its architectures .* suggest 'qwen2'"):
        load_hf(tmp_path)
    from dlmlab.models.hf_auto import hf_format

    assert hf_format(cfg) == "qwen2"
    assert hf_format({"architectures": ["LLaDAModelLM"]}) == "llada"


def test_sharded_safetensors_and_bin(tmp_path):
    hf = _save("llama", tmp_path / "one")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="10KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    one, sharded = read_weights(tmp_path / "one"), read_weights(tmp_path / "sharded")
    assert one.keys() == sharded.keys() and all(torch.equal(one[k], sharded[k]) for k in one)
    binned = tmp_path / "bin"
    binned.mkdir()
    (binned / "config.json").write_text((tmp_path / "one" / "config.json").read_text())
    keys = sorted(one)
    half = len(keys) // 2
    shards = {"pytorch_model-00001-of-00002.bin": keys[:half], "pytorch_model-00002-of-00002.bin": keys[half:]}
    for name, ks in shards.items():
        torch.save({k: one[k] for k in ks}, binned / name)
    index = {"weight_map": {k: name for name, ks in shards.items() for k in ks}}
    (binned / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    tokens = torch.randint(0, V, (1, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(load_hf(binned)[0](tokens), load_hf(tmp_path / "one")[0](tokens))


def test_errors_are_one_line_user_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_hf(tmp_path / "nope")
    with pytest.raises(UserError, match="no config.json"):
        load_hf(tmp_path)
    with pytest.raises(FileNotFoundError):  # also an OSError subclass for callers that catch those
        load_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(UserError, match="'bert' is not supported; supported: gpt2, llama") as e:
        load_hf(tmp_path)
    assert "\n" not in str(e.value)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        load_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(UserError, match="names no model_type"):
        load_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(UserError, match="no weights"):
        load_hf(tmp_path)
