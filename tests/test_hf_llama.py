"""Llama loader vs Hugging Face LlamaForCausalLM on tiny random models (float64, no downloads)."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from dlmlab.models.hf_llama import load_llama  # noqa: E402


def _save_tiny(tmp_path, **kw):
    torch.manual_seed(0)
    args = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, rope_theta=5000.0, rms_norm_eps=1e-5)
    args.update(kw)
    cfg = LlamaConfig(**args)
    hf = LlamaForCausalLM(cfg)
    with torch.no_grad():  # make norms non-trivial so a wrong mapping cannot hide
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    hf.save_pretrained(tmp_path)
    return hf.double().eval()


@pytest.mark.parametrize("kv_heads,tied", [(2, False), (4, False), (1, True)])
def test_llama_logits_match_hf(tmp_path, kv_heads, tied):
    hf = _save_tiny(tmp_path, num_key_value_heads=kv_heads, tie_word_embeddings=tied)
    ours = load_llama(tmp_path, dtype=torch.float64)
    assert ours.cfg.rope_theta == 5000.0 and ours.cfg.norm == "rmsnorm" and ours.cfg.mlp == "swiglu"
    assert ours.cfg.bias is False and ours.cfg.tie_embeddings is tied
    tokens = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(tokens).logits
        got = ours(tokens)
    assert (got - ref).abs().max().item() < 1e-4


def test_llama_kv_cache_decoding_matches_full_forward(tmp_path):
    _save_tiny(tmp_path)
    from dlmlab.models import KVCache

    m = load_llama(tmp_path, dtype=torch.float64)
    tokens = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(2))
    full = m(tokens)
    cache = KVCache()
    step = [m(tokens[:, :5], kv_cache=cache)[:, -1]]
    for i in range(5, 12):
        step.append(m(tokens[:, i:i + 1], kv_cache=cache)[:, -1])
    torch.testing.assert_close(torch.stack(step[:-1], 1), full[:, 4:11], atol=1e-9, rtol=0)


def test_llama_loader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_llama(tmp_path / "nope")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type"):
        load_llama(tmp_path)
    d = tmp_path / "scaled"
    _save_tiny(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 5000.0, "factor": 2.0}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="rope scaling"):
        load_llama(d)
