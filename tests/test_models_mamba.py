"""Mamba-1: selective scan correctness, HF equivalence (float64), conv switch, hooks, errors."""

from __future__ import annotations

import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.models.factory import build_model
from dlmlab.models.mamba import Mamba, MambaConfig, ssm_states
from dlmlab.models.selective_scan import selective_scan, selective_scan_ref


def _scan_inputs(T, Bs=2, Di=6, N=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    kw = dict(dtype=torch.float64, generator=g)
    u = torch.randn(Bs, T, Di, **kw)
    dt = torch.rand(Bs, T, Di, **kw) * 0.8 + 0.02
    A = -torch.rand(Di, N, **kw) * 4 - 0.1
    B = torch.randn(Bs, T, N, **kw)
    C = torch.randn(Bs, T, N, **kw)
    return [t.requires_grad_() for t in (u, dt, A, B, C)]


@pytest.mark.parametrize("T", [1, 7, 40])
@pytest.mark.parametrize("chunk", [1, 5, 16, 64])
def test_chunked_scan_matches_sequential_reference(T, chunk):
    args = _scan_inputs(T)
    y_ref = selective_scan_ref(*args)
    y = selective_scan(*args, chunk=chunk)
    assert torch.allclose(y, y_ref, atol=1e-12, rtol=1e-10)
    g = torch.randn_like(y_ref)
    grads_ref = torch.autograd.grad(y_ref, args, g)
    grads = torch.autograd.grad(y, args, g)
    for name, a, b in zip("u dt A B C".split(), grads, grads_ref):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9), name


def test_scan_passes_gradcheck():
    args = [t.detach()[:, :5].clone().requires_grad_() if t.dim() == 3 else t.detach().clone().requires_grad_()
            for t in _scan_inputs(5, Bs=1, Di=3, N=2)]
    assert torch.autograd.gradcheck(lambda *a: selective_scan(*a, chunk=2), args)


def test_scan_rejects_bad_shapes():
    u, dt, A, B, C = _scan_inputs(4)
    with pytest.raises(ValueError, match="A must be"):
        selective_scan(u, dt, A[:3], B, C)
    with pytest.raises(ValueError, match="B and C"):
        selective_scan(u, dt, A, B[:, :2], C)


# ---------------------------------------------------------------- Hugging Face equivalence
def _hf_mamba(tmp_path, causal_lm: bool, **kw):
    transformers = pytest.importorskip("transformers")
    from dlmlab.models.hf_mamba import load_hf_mamba

    cfg = transformers.MambaConfig(
        vocab_size=37, hidden_size=16, state_size=8, num_hidden_layers=3, expand=2, conv_kernel=4,
        time_step_rank="auto", use_mambapy=False, use_cache=False, **kw,
    )
    torch.manual_seed(0)
    cls = transformers.MambaForCausalLM if causal_lm else transformers.MambaModel
    hf = cls(cfg).double().eval()
    with torch.no_grad():  # make the SSM non-trivial (HF init has D=1, A=1..N for every channel)
        for name, p in hf.named_parameters():
            if "A_log" in name or name.endswith(".D") or "dt_proj.bias" in name or "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
            # HF casts A_log, D and the dt bias to float32 in its scan: keep them exactly representable
            p.copy_(p.float().double())
    hf.save_pretrained(tmp_path)
    ours = load_hf_mamba(tmp_path, dtype=torch.float64).eval()
    return hf, ours


@pytest.mark.parametrize("causal_lm", [False, True])
def test_matches_hf_mamba_per_layer(tmp_path, causal_lm):
    hf, ours = _hf_mamba(tmp_path, causal_lm)
    tokens = torch.randint(0, 37, (2, 23), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = hf(tokens, output_hidden_states=True)
        with ours.cache(["blocks.*.resid_post", "final"]) as cache:
            logits = ours(tokens)
    n = ours.cfg.n_layers
    assert len(out.hidden_states) == n + 1  # after each layer, then after norm_f
    # HF casts B, C and u to float32 inside its CPU scan, so agreement is ~1e-7, not 1e-15
    for i in range(n):
        torch.testing.assert_close(cache[f"blocks.{i}.resid_post"], out.hidden_states[i], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(cache["final"], out.hidden_states[n], atol=2e-6, rtol=1e-5)
    if causal_lm:
        torch.testing.assert_close(logits, out.logits.double(), atol=2e-6, rtol=1e-5)  # HF returns float32 logits
    else:
        torch.testing.assert_close(cache["final"], out.last_hidden_state, atol=2e-6, rtol=1e-5)


def test_matches_hf_mamba_untied_and_new_head(tmp_path):
    from dlmlab.models.hf_mamba import load_hf_mamba

    hf, ours = _hf_mamba(tmp_path, True, tie_word_embeddings=False, use_bias=True)
    tokens = torch.randint(0, 37, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf(tokens).logits.double(), atol=2e-6, rtol=1e-5)
    tagger = load_hf_mamba(tmp_path, n_out=5)
    assert tagger(tokens).shape == (1, 9, 5)
    assert torch.equal(tagger.tok_emb.weight, ours.tok_emb.weight.float())


def test_load_hf_mamba_errors(tmp_path):
    from dlmlab.models.hf_mamba import load_hf_mamba

    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf_mamba(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": 8}')
    with pytest.raises(ConfigError, match="model_type"):
        load_hf_mamba(tmp_path)


# ---------------------------------------------------------------- model behaviour
def _tiny(**kw):
    return Mamba(MambaConfig(vocab_size=11, n_out=3, d_model=16, n_layers=2, d_state=4, **kw))


def test_sequential_and_chunked_models_agree():
    torch.manual_seed(0)
    m = _tiny().double()
    tokens = torch.randint(0, 11, (3, 20))
    y = m(tokens)
    m.cfg.scan = "sequential"
    torch.testing.assert_close(m(tokens), y, atol=1e-12, rtol=1e-10)


def test_use_conv_false_runs_and_is_causal():
    torch.manual_seed(0)
    m = _tiny(use_conv=False)
    assert m.blocks[0].mixer.conv1d is None
    assert not any("conv1d" in k for k in m.state_dict())
    a = torch.randint(0, 11, (2, 12))
    b = a.clone()
    b[:, 8:] = (b[:, 8:] + 1) % 11
    ya, yb = m(a), m(b)
    assert torch.allclose(ya[:, :8], yb[:, :8], atol=1e-6)
    assert not torch.allclose(ya[:, 8:], yb[:, 8:])
    ya.sum().backward()
    assert m.blocks[0].mixer.in_proj.weight.grad is not None


def test_use_conv_false_equals_identity_conv():
    """Removing Conv1D == a conv whose only tap is the current position (weight 1, bias 0)."""
    torch.manual_seed(0)
    with_conv = _tiny().double()
    no_conv = _tiny(use_conv=False).double()
    state = {k: v for k, v in with_conv.state_dict().items() if "conv1d" not in k}
    no_conv.load_state_dict(state)
    tokens = torch.randint(0, 11, (2, 9))
    assert not torch.allclose(with_conv(tokens), no_conv(tokens))
    with torch.no_grad():
        for b in with_conv.blocks:
            b.mixer.conv1d.weight.zero_()
            b.mixer.conv1d.weight[..., -1] = 1.0  # last tap multiplies x_t (causal padding on the left)
            b.mixer.conv1d.bias.zero_()
    torch.testing.assert_close(with_conv(tokens), no_conv(tokens), atol=1e-12, rtol=1e-10)


def test_hook_points_and_state_readout():
    m = _tiny()
    tokens = torch.randint(0, 11, (2, 7))
    with m.cache() as c:
        m(tokens)
    for name, shape in [("embed", (2, 7, 16)), ("blocks.1.resid_pre", (2, 7, 16)),
                        ("blocks.1.resid_post", (2, 7, 16)), ("blocks.0.mixer.conv_out", (2, 7, 32)),
                        ("blocks.0.mixer.ssm_out", (2, 7, 32)), ("final", (2, 7, 16)), ("logits", (2, 7, 3))]:
        assert tuple(c[name].shape) == shape, name
    states = ssm_states(m, tokens)
    assert len(states) == 2 and tuple(states[0].shape) == (2, 7, 32, 4)
    # zero-ablating the SSM output of every layer changes the logits (the hook is causal)
    with m.replace({"blocks.*.mixer.ssm_out": torch.zeros(1)}):
        ablated = m(tokens)
    assert not torch.allclose(ablated, c["logits"])


def test_bad_config_and_tokens():
    with pytest.raises(ConfigError, match="d_state"):
        build_model("mamba", vocab_size=5, d_state=0)
    with pytest.raises(ConfigError, match="unknown mamba option 'headdim'"):
        build_model("mamba", vocab_size=5, headdim=4)
    m = _tiny()
    with pytest.raises(ValueError, match="out of range"):
        m(torch.tensor([[0, 11]]))


def test_inference_path_matches_training_path():
    args = [t.detach() for t in _scan_inputs(30)]
    with torch.no_grad():
        y_inf = selective_scan(*args, chunk=8)
    y_train = selective_scan(*[t.clone().requires_grad_() for t in args], chunk=8)
    assert torch.allclose(y_inf, y_train.detach(), atol=1e-13)
    assert torch.allclose(y_inf, selective_scan_ref(*args), atol=1e-12)
