"""Transformer core: SDPA vs explicit attention, masks, KV caches, bad inputs."""

import itertools

import pytest
import torch

from conftest import tiny_transformer
from dlmlab.config import ConfigError
from dlmlab.models import KVCache, Transformer, TransformerConfig

MASKS = ["causal", "bidirectional", "hybrid"]
POSITIONS = ["learned", "rope", "alibi", "none"]


def fwd(model, x, **kw):
    with torch.no_grad():
        return model(x, **kw)


@pytest.mark.parametrize("mask,pos", list(itertools.product(MASKS, POSITIONS)))
def test_explicit_path_equals_sdpa(mask, pos, tokens):
    model = tiny_transformer(attn_mask=mask, positions=pos)
    kw = {"prompt_len": torch.tensor([3, 5, 12])} if mask == "hybrid" else {}
    fast = fwd(model, tokens, **kw)
    with model.cache(["*.attn.pattern"]) as c:
        slow = fwd(model, tokens, **kw)
    assert set(c) == {"blocks.0.attn.pattern", "blocks.1.attn.pattern"}  # explicit path really ran
    assert (fast - slow).abs().max().item() < 1e-5
    p = c["blocks.0.attn.pattern"]
    assert p.shape == (3, 4, 12, 12)
    assert torch.allclose(p.sum(-1), torch.ones(3, 4, 12), atol=1e-5)
    if mask == "causal":
        assert p.triu(1).abs().max() == 0


def test_hybrid_mask_semantics(tokens):
    model = tiny_transformer(attn_mask="hybrid", positions="rope")
    P = 5
    base = fwd(model, tokens, prompt_len=P)
    # 1) changing target tokens leaves every prompt position untouched
    changed_target = tokens.clone()
    changed_target[:, P:] = (changed_target[:, P:] + 1) % 23
    out = fwd(model, changed_target, prompt_len=P)
    assert torch.equal(out[:, :P], base[:, :P])
    # 2) the target sees the prompt, and target positions see later target positions (bidirectional)
    changed_prompt = tokens.clone()
    changed_prompt[:, 0] = (changed_prompt[:, 0] + 1) % 23
    assert (fwd(model, changed_prompt, prompt_len=P)[:, P:] - base[:, P:]).abs().max() > 1e-4
    changed_last = tokens.clone()
    changed_last[:, -1] = (changed_last[:, -1] + 1) % 23
    assert (fwd(model, changed_last, prompt_len=P)[:, P] - base[:, P]).abs().max() > 1e-4
    # 3) inside the prompt the mask is causal
    changed_p = tokens.clone()
    changed_p[:, P - 1] = (changed_p[:, P - 1] + 1) % 23
    assert torch.equal(fwd(model, changed_p, prompt_len=P)[:, : P - 1], base[:, : P - 1])
    # 4) per-row prompt lengths equal per-row calls
    lens = torch.tensor([2, 7, 12])
    rows = fwd(model, tokens, prompt_len=lens)
    for b in range(3):
        assert torch.allclose(rows[b], fwd(model, tokens[b:b + 1], prompt_len=int(lens[b]))[0], atol=1e-6)
    # prompt_len = T is exactly causal
    assert torch.allclose(fwd(model, tokens, prompt_len=12), fwd(model, tokens, attn_mask="causal"), atol=1e-6)


def test_hybrid_needs_prompt_len(tokens):
    model = tiny_transformer(attn_mask="hybrid")
    with pytest.raises(ValueError, match="prompt_len"):
        model(tokens)


@pytest.mark.parametrize("pos", POSITIONS)
def test_kv_cache_incremental_decoding_equals_full(pos, tokens):
    model = tiny_transformer(positions=pos)
    full = fwd(model, tokens)
    cache = KVCache()
    steps = [fwd(model, tokens[:, :4], kv_cache=cache)]  # a prefix, then one token at a time
    for t in range(4, tokens.shape[1]):
        steps.append(fwd(model, tokens[:, t:t + 1], kv_cache=cache))
    assert cache.length == tokens.shape[1]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() < 1e-5
    # and the explicit path with a cache
    cache = KVCache()
    fwd(model, tokens[:, :6], kv_cache=cache)
    with model.cache(["*.pattern"]) as c:
        tail = fwd(model, tokens[:, 6:], kv_cache=cache)
    assert c["blocks.0.attn.pattern"].shape == (3, 4, 6, 12)
    assert (tail - full[:, 6:]).abs().max().item() < 1e-5


@pytest.mark.parametrize("pos", POSITIONS)
def test_frozen_prompt_cache_plus_hybrid_target(pos, tokens):
    model = tiny_transformer(attn_mask="hybrid", positions=pos)
    P = 5
    full = fwd(model, tokens, prompt_len=P)
    cache = KVCache()
    prompt_out = fwd(model, tokens[:, :P], attn_mask="causal", kv_cache=cache)
    assert torch.allclose(prompt_out, full[:, :P], atol=1e-5)
    frozen = cache.freeze()
    for _ in range(2):  # reusable: a frozen cache does not grow
        tgt = fwd(model, tokens[:, P:], prompt_len=P, kv_cache=frozen)
        assert frozen.length == P
        assert (tgt - full[:, P:]).abs().max().item() < 1e-5
    # batch-1 prompt cache expanded to a batch of targets
    c1 = KVCache()
    fwd(model, tokens[:1, :P], attn_mask="causal", kv_cache=c1)
    many = tokens[:1].expand(3, -1)
    out = fwd(model, many[:, P:], prompt_len=P, kv_cache=c1.freeze().expand(3))
    assert (out - fwd(model, many, prompt_len=P)[:, P:]).abs().max().item() < 1e-5


def test_embed_add_and_n_out(tokens):
    model = tiny_transformer(n_out=5)
    assert fwd(model, tokens).shape == (3, 12, 5)
    model = tiny_transformer()
    extra = torch.randn(3, 12, 32)
    with model.cache(["blocks.0.resid_pre", "embed", "pos_embed"]) as c:
        fwd(model, tokens, embed_add=extra)
    assert torch.allclose(c["blocks.0.resid_pre"], c["embed"] + c["pos_embed"] + extra, atol=1e-6)


def test_attention_only_and_norm_variants(tokens):
    for kw in [dict(d_mlp=0), dict(norm="none"), dict(norm="rmsnorm", mlp="swiglu", bias=False),
               dict(mlp="relu"), dict(mlp="gelu"), dict(n_heads=3, d_model=30), dict(d_head=5)]:
        model = tiny_transformer(**kw)
        out = fwd(model, tokens)
        assert out.shape == (3, 12, 23) and torch.isfinite(out).all(), kw
        with model.cache(["*.pattern"]):
            assert (fwd(model, tokens) - out).abs().max() < 1e-5, kw
    names = tiny_transformer(d_mlp=0).hook_points
    assert "blocks.0.mlp_out" not in names and "blocks.0.attn.head_out" in names


def test_bad_tokens_and_lengths_raise_clear_errors():
    model = tiny_transformer()
    with pytest.raises(ValueError, match="token id 23 out of range"):
        model(torch.tensor([[1, 23]]))
    with pytest.raises(ValueError, match="token id -1 out of range"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="sequence length 33 exceeds max_seq_len 32"):
        model(torch.zeros(1, 33, dtype=torch.long))
    cache = KVCache()
    model(torch.zeros(1, 30, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match="sequence length 34 exceeds"):
        model(torch.zeros(1, 4, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match="unknown attention mask 'sideways'"):
        model(torch.zeros(1, 3, dtype=torch.long), attn_mask="sideways")


@pytest.mark.parametrize("kw,msg", [
    (dict(d_model=30, n_heads=4), "not divisible by model.n_heads"),
    (dict(n_heads=0), "n_heads must be > 0"),
    (dict(d_mlp=-1), "d_mlp must be >= 0"),
    (dict(max_seq_len=0), "max_seq_len must be > 0"),
    (dict(positions="rope", d_head=3), "rope needs an even"),
])
def test_bad_configs_raise_config_error(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        Transformer(TransformerConfig(vocab_size=10, **kw))


def test_missing_vocab_is_named():
    with pytest.raises(ValueError, match="vocab_size must be set"):
        Transformer(TransformerConfig())


def test_head_weights_shapes_and_reconstruction(tokens):
    model = tiny_transformer()
    attn = model.blocks[0].attn
    w = attn.head_weights()
    assert w["W_Q"].shape == (4, 32, 8) and w["W_O"].shape == (4, 8, 32) and w["b_Q"].shape == (4, 8)
    with model.cache(["blocks.0.attn.q", "blocks.0.resid_pre"]) as c:
        fwd(model, tokens)
    x = model.blocks[0].ln1(c["blocks.0.resid_pre"])
    q = torch.einsum("btd,hde->bthe", x, w["W_Q"]) + w["b_Q"]
    assert torch.allclose(q, c["blocks.0.attn.q"], atol=1e-5)


@pytest.mark.parametrize("mask,pos", [("bidirectional", "alibi"), ("causal", "learned"), ("hybrid", "rope")])
def test_gradients_flow_through_both_paths(tokens, mask, pos):
    model = tiny_transformer(attn_mask=mask, positions=pos).train()
    if mask == "hybrid":
        model = _with_prompt(model, 4)
    model(tokens).sum().backward()
    g_fast = model.blocks[0].attn.W_q.weight.grad.clone()
    model.zero_grad()
    with model.cache(["*.pattern"], detach=False):
        model(tokens).sum().backward()
    assert torch.allclose(g_fast, model.blocks[0].attn.W_q.weight.grad, atol=1e-5)


class _with_prompt(torch.nn.Module):
    """Wrap a hybrid model so forward() passes a fixed prompt_len."""

    def __init__(self, model, P):
        super().__init__()
        self.m, self.P = model, P
        self.blocks = model.blocks

    def forward(self, x):
        return self.m(x, prompt_len=self.P)

    def cache(self, *a, **k):
        return self.m.cache(*a, **k)


def test_qkv_bias_only_on_query_key_value(tokens):
    """qkv_bias (Qwen2 / Dream style): biases on W_q/W_k/W_v alone, returned by head_weights."""
    model = tiny_transformer(bias=False, qkv_bias=True, norm="rmsnorm", mlp="swiglu", positions="rope")
    biased = {n for n, _ in model.named_parameters() if n.endswith(".bias")}
    assert biased == {f"blocks.{i}.attn.{w}.bias" for i in range(2) for w in ("W_q", "W_k", "W_v")}
    w = model.blocks[1].attn.head_weights()
    assert torch.equal(w["b_K"], model.blocks[1].attn.W_k.bias.reshape(4, 8)) and w["b_K"].abs().max() > 0
    assert torch.equal(w["b_O"], torch.zeros(32))
    with model.cache(["blocks.1.attn.k", "blocks.1.resid_pre"]) as c:
        fwd(model, tokens)
    x = model.blocks[1].ln1(c["blocks.1.resid_pre"])
    k = torch.einsum("btd,hde->bthe", x, w["W_K"]) + w["b_K"]
    assert torch.allclose(k, c["blocks.1.attn.k"], atol=1e-5)
    # zero q/k/v biases give exactly the bias-free model with the same weights
    plain = tiny_transformer(bias=False, norm="rmsnorm", mlp="swiglu", positions="rope")
    with torch.no_grad():
        for n in biased:
            model.get_parameter(n).zero_()
    model.load_state_dict({**plain.state_dict(), **{n: model.get_parameter(n) for n in biased}})
    assert torch.equal(fwd(model, tokens), fwd(plain, tokens))
    assert tiny_transformer(bias=False).blocks[0].attn.W_q.bias is None
