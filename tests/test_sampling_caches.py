"""Caches: exact ones equal recomputing every position (1e-5); the approximate ones' deviation is measured."""

import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.prediff import PreDiffLM
from dlmlab.sampling import DecodeConfig, TraceConfig, generate, kv_reuse_exactness
from dlmlab.sampling.deviation import kv_reuse_deviation

V = 40


def prediff(positions="learned", shift=False, seed=0):
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64, positions=positions)
    m = PreDiffLM(Transformer(cfg), shift=shift).double().eval()
    with torch.no_grad():
        torch.nn.init.normal_(m.time_embed.fc2.weight, std=0.05)
        torch.nn.init.normal_(m.self_cond_proj.weight, std=0.2)
    return m


def mdlm(seed=0, positions="rope"):
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=V + 1, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64,
                            positions=positions, attn_mask="bidirectional")
    return Transformer(cfg).double().eval()


def run(model, cache, mask_id=None, **kw):
    prompt = torch.randint(0, V - 1, (3, 6), generator=torch.Generator().manual_seed(1))
    cfg = DecodeConfig(steps=12, temperature=0.9, top_p=0.95, kv_reuse=cache, **kw)
    return generate(model, prompt, 20, cfg, torch.Generator().manual_seed(5), mask_id=mask_id,
                    trace=TraceConfig(logits=True), record=True)


def assert_same(a, b):
    assert len(a.trajectory) == len(b.trajectory)
    for x, y in zip(a.trajectory, b.trajectory):
        torch.testing.assert_close(x.logits, y.logits, atol=1e-5, rtol=0)
    assert torch.equal(a.tokens, b.tokens)


@pytest.mark.parametrize("cache", ["prompt", "prefix"])
@pytest.mark.parametrize("positions,shift", [("learned", False), ("rope", True)])
def test_prediff_hybrid_caches_are_exact_with_blocks(cache, positions, shift):
    m = prediff(positions, shift)
    ref = run(m, "none", block_len=8)
    got = run(m, cache, block_len=8)
    assert got.exactness == "exact"
    assert_same(ref, got)
    assert got.positions < ref.positions  # the cache computed fewer positions


@pytest.mark.parametrize("cache", ["prompt", "prefix", "dual"])
@pytest.mark.parametrize("which", ["prediff", "mdlm"])
def test_block_causal_caches_are_exact(cache, which):
    m, mid = (prediff(), None) if which == "prediff" else (mdlm(), V)
    ref = run(m, "none", mid, block_len=5, attention="block_causal")
    got = run(m, cache, mid, block_len=5, attention="block_causal")
    assert got.exactness == "exact"
    assert_same(ref, got)


@pytest.mark.parametrize("cache", ["prompt", "prefix", "dual"])
def test_bidirectional_caches_are_approximate_and_their_deviation_is_measured(cache):
    m = mdlm()
    assert kv_reuse_exactness(cache, "model", prompt_causal=False) == "approximate"
    prompt = torch.randint(0, V - 1, (2, 6), generator=torch.Generator().manual_seed(1))
    canvas = torch.cat([prompt, torch.full((2, 16), V)], 1)
    cfg = DecodeConfig(steps=16, kv_reuse=cache, block_len=8, temperature=0.0)
    dev = kv_reuse_deviation(m, canvas, 6, cfg, mask_id=V)
    print(cache, dev)
    assert dev["steps"] == 16 and dev["max_abs"] > 1e-8  # stale keys/values change the logits ...
    exact = kv_reuse_deviation(m, canvas, 6, DecodeConfig(steps=16, kv_reuse="none", block_len=8, temperature=0.0), mask_id=V)
    assert exact["max_abs"] < 1e-10 and exact["top1_agree"] == 1.0  # ... recomputation does not
    # refreshing at every step makes the approximate cache exact again
    every = kv_reuse_deviation(m, canvas, 6, DecodeConfig(steps=16, kv_reuse=cache, block_len=8, temperature=0.0,
                                                          refresh_every=1), mask_id=V)
    assert every["max_abs"] < 1e-10


def test_exactness_labels():
    assert kv_reuse_exactness("none", "model", False) == "exact"
    assert kv_reuse_exactness("prefix", "model", True) == "exact"
    assert kv_reuse_exactness("dual", "model", True) == "approximate"
    assert kv_reuse_exactness("dual", "block_causal", False) == "exact"


def test_reuse_of_unchanged_rows_skips_forwards_exactly():
    m = mdlm()
    prompt = torch.randint(0, V - 1, (2, 4), generator=torch.Generator().manual_seed(2))
    canvas = torch.cat([prompt, torch.full((2, 6), V)], 1)
    canvas[1, 4:9] = 3  # row 1 has a single masked position: it finishes after one step and drops out
    from dlmlab.sampling import decode

    a = decode(m, canvas, 4, DecodeConfig(steps=6, kv_reuse="none"), torch.Generator().manual_seed(0), mask_id=V)
    assert not (a.tokens == V).any()
    assert a.positions < a.forwards * 2 * 10  # later forwards ran row 0 only


def test_dual_cache_rejects_alibi():
    m = mdlm(positions="alibi")
    with pytest.raises(ConfigError, match="ALiBi"):
        run(m, "dual", V, block_len=5)
