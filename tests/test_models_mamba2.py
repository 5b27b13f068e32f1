"""Mamba-2 (SSD): chunked == sequential, HF Mamba2Model equivalence (float64, n_groups 1 and 2), hooks, errors."""

from __future__ import annotations

import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.models.factory import build_model
from dlmlab.models.mamba2 import Mamba2, Mamba2Config, ssm_states
from dlmlab.models.ssd import segsum, ssd_scan, ssd_scan_ref
from mamba2_loop import Shape, skip_unless_hf_agrees


def test_segsum_definition():
    a = torch.randn(6, dtype=torch.float64)
    s = segsum(a)
    for i in range(6):
        for j in range(6):
            if j > i:
                assert s[i, j] == float("-inf")
            else:
                assert torch.isclose(s[i, j], a[j + 1: i + 1].sum(), atol=1e-14)


def _inputs(T, Bs=2, H=3, P=4, N=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    kw = dict(dtype=torch.float64, generator=g)
    x = torch.randn(Bs, T, H, P, **kw)
    dt = torch.rand(Bs, T, H, **kw) * 0.8 + 0.02
    A = -torch.rand(H, **kw) * 3 - 0.1
    B = torch.randn(Bs, T, N, **kw)
    C = torch.randn(Bs, T, N, **kw)
    return [t.requires_grad_() for t in (x, dt, A, B, C)]


@pytest.mark.parametrize("T", [1, 9, 40])
@pytest.mark.parametrize("chunk", [1, 4, 16, 64])
def test_chunked_ssd_matches_sequential(T, chunk):
    args = _inputs(T)
    y_ref, y = ssd_scan_ref(*args), ssd_scan(*args, chunk=chunk)
    assert torch.allclose(y, y_ref, atol=1e-12, rtol=1e-10)
    g = torch.randn_like(y)
    for name, a, b in zip("x dt A B C".split(), torch.autograd.grad(y, args, g), torch.autograd.grad(y_ref, args, g)):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9), name


# ---------------------------------------------------------------- Hugging Face equivalence
def _hf_mamba2(tmp_path, causal_lm: bool, n_groups: int = 1):
    # only for transformers versions whose Mamba2Mixer matches the float64 loop (tests/test_ssd_reference.py)
    transformers = skip_unless_hf_agrees(Shape(n_groups=n_groups), T=21, chunk=8)
    from dlmlab.models.hf_mamba import load_hf_mamba

    cfg = transformers.Mamba2Config(
        vocab_size=41, hidden_size=16, state_size=8, num_hidden_layers=3, expand=2, head_dim=8, num_heads=4,
        n_groups=n_groups, conv_kernel=4, chunk_size=8, use_cache=False, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    cls = transformers.Mamba2ForCausalLM if causal_lm else transformers.Mamba2Model
    hf = cls(cfg).double().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "A_log" in name or name.endswith(".D") or "dt_bias" in name or "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
            p.copy_(p.float().double())  # HF casts A, D, dt_bias to float32 in its scan
    hf.save_pretrained(tmp_path)
    ours = load_hf_mamba(tmp_path, dtype=torch.float64).eval()
    return hf, ours


def _hf_block_outputs(hf, tokens):
    """HF output after each Mamba2Block and after norm_f, read by forward hooks.

    Not ``output_hidden_states``: its layout changed in transformers 5.25 (embedding, blocks 0..n-2,
    then norm_f; before: blocks 0..n-1, then norm_f).
    """
    backbone = getattr(hf, "backbone", hf)
    seen = []
    modules = [*backbone.layers, backbone.norm_f]
    handles = [m.register_forward_hook(lambda mod, inp, out: seen.append(out)) for m in modules]
    try:
        out = hf(tokens)
    finally:
        for h in handles:
            h.remove()
    return out, seen


@pytest.mark.parametrize("causal_lm,n_groups", [(False, 1), (True, 1), (True, 2)])
def test_matches_hf_mamba2_per_layer(tmp_path, causal_lm, n_groups):
    hf, ours = _hf_mamba2(tmp_path, causal_lm, n_groups)
    assert isinstance(ours, Mamba2) and ours.cfg.n_heads == 4 and ours.cfg.n_groups == n_groups
    tokens = torch.randint(0, 41, (2, 21), generator=torch.Generator().manual_seed(1))  # 21: padded last chunk
    with torch.no_grad():
        out, per_block = _hf_block_outputs(hf, tokens)
        with ours.cache(["blocks.*.resid_post", "final"]) as cache:
            logits = ours(tokens)
    n = ours.cfg.n_layers
    assert len(per_block) == n + 1
    # HF's torch path runs its scan and gated norm in float32, hence ~1e-7 agreement
    for i in range(n):
        torch.testing.assert_close(cache[f"blocks.{i}.resid_post"], per_block[i].double(), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(cache["final"], per_block[n].double(), atol=2e-6, rtol=1e-5)
    if causal_lm:
        torch.testing.assert_close(logits, out.logits.double(), atol=2e-6, rtol=1e-5)
    else:
        torch.testing.assert_close(cache["final"], out.last_hidden_state.double(), atol=2e-6, rtol=1e-5)


def test_hf_mamba2_groups_must_divide_heads(tmp_path):
    import json

    from dlmlab.models.hf_mamba import load_hf_mamba

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "mamba2", "hidden_size": 16, "vocab_size": 5, "num_hidden_layers": 1, "state_size": 4,
        "n_groups": 3, "head_dim": 8, "num_heads": 4}))
    with pytest.raises(ConfigError, match="n_groups"):
        load_hf_mamba(tmp_path)


# ---------------------------------------------------------------- model behaviour
def _tiny(**kw):
    return Mamba2(Mamba2Config(vocab_size=11, n_out=3, d_model=16, n_layers=2, d_state=4, headdim=8, **kw))


def test_sequential_and_chunked_models_agree():
    torch.manual_seed(0)
    m = _tiny(scan="chunked", scan_chunk=4).double()
    tokens = torch.randint(0, 11, (3, 19))
    y = m(tokens)
    m.cfg.scan = "sequential"
    torch.testing.assert_close(m(tokens), y, atol=1e-12, rtol=1e-10)


def test_causal_use_conv_false_hooks_and_states():
    torch.manual_seed(0)
    m = _tiny(use_conv=False)
    assert m.blocks[0].mixer.conv1d is None
    a = torch.randint(0, 11, (2, 10))
    b = a.clone()
    b[:, 6:] = (b[:, 6:] + 1) % 11
    with m.cache() as c:
        ya = m(a)
    assert torch.allclose(ya[:, :6], m(b)[:, :6], atol=1e-6)
    for name, shape in [("embed", (2, 10, 16)), ("blocks.0.resid_pre", (2, 10, 16)),
                        ("blocks.1.resid_post", (2, 10, 16)), ("blocks.0.mixer.conv_out", (2, 10, 32 + 8)),
                        ("blocks.0.mixer.dt", (2, 10, 4)), ("blocks.0.mixer.ssm_out", (2, 10, 32)),
                        ("final", (2, 10, 16)), ("logits", (2, 10, 3))]:
        assert tuple(c[name].shape) == shape, name
    states = ssm_states(m, a)
    assert tuple(states[1].shape) == (2, 10, 4, 8, 4)
    ya.sum().backward()
    assert m.blocks[0].mixer.A_log.grad is not None


def test_bad_config():
    with pytest.raises(ConfigError, match="multiple of model.headdim"):
        build_model("mamba2", vocab_size=5, d_inner=100, headdim=32)
    with pytest.raises(ConfigError, match="d_state"):
        Mamba2(Mamba2Config(vocab_size=5, d_state=-1))


def test_use_conv_false_equals_identity_conv():
    torch.manual_seed(0)
    with_conv, no_conv = _tiny().double(), _tiny(use_conv=False).double()
    no_conv.load_state_dict({k: v for k, v in with_conv.state_dict().items() if "conv1d" not in k})
    tokens = torch.randint(0, 11, (2, 9))
    assert not torch.allclose(with_conv(tokens), no_conv(tokens))
    with torch.no_grad():
        for b in with_conv.blocks:
            b.mixer.conv1d.weight.zero_()
            b.mixer.conv1d.weight[..., -1] = 1.0
            b.mixer.conv1d.bias.zero_()
    torch.testing.assert_close(with_conv(tokens), no_conv(tokens), atol=1e-12, rtol=1e-10)
