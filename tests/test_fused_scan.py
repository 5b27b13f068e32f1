"""Fused C++ selective scan and Conv1D+SiLU: equal to the pure-PyTorch reference (float64 outputs
and gradients, float32 close), through the Mamba block with and without Conv1D, independent of
the thread count, and the fallback when the kernel cannot be built."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from dlmlab.models import fused_scan
from dlmlab.models.factory import build_model
from dlmlab.models.fused_conv import conv_silu, reference_conv_silu
from dlmlab.models.fused_scan import fused_selective_scan, reference_epilogue
from dlmlab.models.selective_scan import selective_scan_ref

needs_kernel = pytest.mark.skipif(not fused_scan.available(), reason="fused scan kernel could not be built")


def _inputs(Bs, T, Di, N, dtype=torch.float64, seed=0):
    """u, dt, A, B, C, D, z (all requiring grad)."""
    g = torch.Generator().manual_seed(seed)
    kw = dict(dtype=dtype, generator=g)
    u = torch.randn(Bs, T, Di, **kw)
    dt = torch.rand(Bs, T, Di, **kw) * 0.8 + 0.02
    A = -torch.rand(Di, N, **kw) * 4 - 0.1
    B, C = torch.randn(Bs, T, N, **kw), torch.randn(Bs, T, N, **kw)
    D, z = torch.randn(Di, **kw), torch.randn(Bs, T, Di, **kw) * 3
    return [t.requires_grad_() for t in (u, dt, A, B, C, D, z)]


def _grads(fn, args, seed=1):
    y = fn(*args)
    gy = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)).to(y.dtype)
    return y, torch.autograd.grad(y, [a for a in args if a is not None], gy)


def _ref(u, dt, A, B, C, D=None, z=None):
    return reference_epilogue(selective_scan_ref(u, dt, A, B, C), u, D, z)


@needs_kernel
@pytest.mark.parametrize("shape", [(2, 7, 6, 4, 5), (3, 40, 37, 5, 16), (1, 1, 17, 3, 1), (2, 33, 16, 16, 8)])
@pytest.mark.parametrize("epilogue", ["none", "D", "D+z"])
def test_fused_scan_equals_reference_float64(shape, epilogue):
    Bs, T, Di, N, chunk = shape
    u, dt, A, B, C, D, z = _inputs(Bs, T, Di, N)
    D_ = D if epilogue != "none" else None
    z_ = z if epilogue == "D+z" else None
    args = [u, dt, A, B, C, D_, z_]
    y, g = _grads(lambda *a: fused_selective_scan(*a, chunk=chunk), args)
    y_ref, g_ref = _grads(_ref, args)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=1e-10)
    names = [n for n, a in zip("u dt A B C D z".split(), args) if a is not None]
    for name, a, b in zip(names, g, g_ref):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-9, msg=lambda m, n=name: f"grad {n}: {m}")


@needs_kernel
def test_fused_scan_float32_close():
    args = _inputs(3, 50, 40, 16, dtype=torch.float32, seed=3)
    y, g = _grads(lambda *a: fused_selective_scan(*a, chunk=16), args)
    args64 = [a.detach().double().requires_grad_() for a in args]
    y_ref, g_ref = _grads(_ref, args64)
    torch.testing.assert_close(y.double(), y_ref, atol=1e-4, rtol=1e-4)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a.double(), b, atol=1e-3, rtol=1e-3)


@needs_kernel
def test_fused_scan_inference_path_equals_training_path():
    args = [a.detach() for a in _inputs(2, 21, 19, 4)]
    with torch.no_grad():
        y_inf = fused_selective_scan(*args, chunk=4)
    y_train = fused_selective_scan(*[a.clone().requires_grad_() for a in args], chunk=4)
    assert torch.equal(y_inf, y_train.detach())


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_softplus_of_dt(dtype):
    """``dt_softplus``: raw dt over a wide range (both sides of torch's threshold 20); gradient w.r.t. raw dt."""
    u, _, A, B, C, D, z = _inputs(2, 30, 24, 4, dtype=dtype)
    raw = torch.linspace(-30, 30, 2 * 30 * 24, dtype=dtype).reshape(2, 30, 24)
    raw = raw[:, :, torch.randperm(24, generator=torch.Generator().manual_seed(0))].contiguous().requires_grad_()
    A = (A.detach() * 0.01).requires_grad_()  # keep exp(dt A) away from 0 for dt up to 30
    args = [u, raw, A, B, C, D, z]
    y, g = _grads(lambda *a: fused_selective_scan(*a, chunk=7, dt_softplus=True), args)
    args64 = [a.detach().double().requires_grad_() for a in args]
    y_ref, g_ref = _grads(lambda u, r, *rest: _ref(u, torch.nn.functional.softplus(r), *rest), args64)
    tol = dict(atol=1e-12, rtol=1e-10) if dtype == torch.float64 else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(y.double(), y_ref, **tol)
    for name, a, b in zip("u dt A B C D z".split(), g, g_ref):
        torch.testing.assert_close(a.double(), b, **tol, msg=lambda m, n=name: f"grad {n}: {m}")


def test_fused_scan_rejects_bad_shapes():
    u, dt, A, B, C, D, z = _inputs(2, 4, 6, 3)
    with pytest.raises(ValueError, match="A must be"):
        fused_selective_scan(u, dt, A[:3], B, C)
    with pytest.raises(ValueError, match="D must be"):
        fused_selective_scan(u, dt, A, B, C, D=D[:2])
    with pytest.raises(ValueError, match="z must be"):
        fused_selective_scan(u, dt, A, B, C, z=z[:, :2])
    with pytest.raises(ValueError, match="chunk"):
        fused_selective_scan(u, dt, A, B, C, chunk=0)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_conv_silu_equals_conv1d(dtype):
    torch.manual_seed(0)
    Di, K = 13, 4
    conv = nn.Conv1d(Di, Di, K, groups=Di, padding=K - 1).to(dtype)
    xz = torch.randn(3, 9, 2 * Di, dtype=dtype, requires_grad=True)
    x = xz[..., :Di]  # a strided view, as in the Mamba block
    gy = torch.randn(3, 9, Di, dtype=dtype)
    got = conv_silu(x, conv)
    g_got = torch.autograd.grad(got, [xz, conv.weight, conv.bias], gy)
    want = reference_conv_silu(x, conv)
    g_want = torch.autograd.grad(want, [xz, conv.weight, conv.bias], gy)
    tol = dict(atol=1e-12, rtol=1e-10) if dtype == torch.float64 else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got, want, **tol)
    for a, b in zip(g_got, g_want):
        torch.testing.assert_close(a, b, **tol)


def _model_grads(scan: str, use_conv: bool, dtype=torch.float64):
    torch.manual_seed(0)
    m = build_model("mamba", vocab_size=11, n_out=5, d_model=24, n_layers=2, d_state=5, scan=scan,
                    use_conv=use_conv).to(dtype)
    with torch.no_grad():  # make D, A and the dt bias non-trivial
        for mixer in (blk.mixer for blk in m.blocks):
            mixer.D.add_(torch.randn_like(mixer.D))
            mixer.A_log.add_(0.3 * torch.randn_like(mixer.A_log))
            mixer.dt_proj.bias.add_(0.5 * torch.randn_like(mixer.dt_proj.bias))
    tokens = torch.randint(0, 11, (3, 19), generator=torch.Generator().manual_seed(2))
    out = m(tokens)
    out.square().sum().backward()
    return out.detach(), {n: p.grad for n, p in m.named_parameters()}


@needs_kernel
@pytest.mark.parametrize("use_conv", [True, False])
def test_mamba_block_fused_equals_reference(use_conv):
    """Every parameter's gradient (in_proj, conv, x_proj, dt_proj incl. the dt bias, A_log, D, out_proj)."""
    y, g = _model_grads("fused", use_conv)
    y_ref, g_ref = _model_grads("sequential", use_conv)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=1e-10)
    assert g.keys() == g_ref.keys()
    for name in g:
        torch.testing.assert_close(g[name], g_ref[name], atol=1e-10, rtol=1e-9, msg=lambda m, n=name: f"{n}: {m}")


@needs_kernel
def test_results_do_not_depend_on_thread_count():
    old = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            args = _inputs(5, 37, 41, 6, dtype=torch.float32, seed=4)
            y, g = _grads(lambda *a: fused_selective_scan(*a, chunk=8), args)
            ym, gm = _model_grads("fused", True, dtype=torch.float32)
            runs.append([y, *g, ym, *gm.values()])
    finally:
        torch.set_num_threads(old)
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_fallback_when_kernel_unavailable(monkeypatch):
    """Without the kernel: one warning, and the pure-PyTorch path gives the reference result."""
    from torch.utils import cpp_extension

    def fail(*a, **k):
        raise RuntimeError("no compiler")

    fused_scan.load_extension.cache_clear()
    monkeypatch.setattr(cpp_extension, "load", fail)
    try:
        u, dt, A, B, C, D, z = _inputs(2, 9, 6, 3)
        with pytest.warns(RuntimeWarning, match="fused selective scan unavailable"):
            y = fused_selective_scan(u, dt, A, B, C, D=D, z=z)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # only once
            y2 = fused_selective_scan(u, dt, A, B, C, D=D, z=z)
            x = torch.randn(2, 9, 6, dtype=torch.float64)
            conv = nn.Conv1d(6, 6, 4, groups=6, padding=3).double()
            torch.testing.assert_close(conv_silu(x, conv), reference_conv_silu(x, conv))
        torch.testing.assert_close(y, _ref(u, dt, A, B, C, D, z), atol=1e-12, rtol=1e-10)
        assert torch.equal(y, y2)
    finally:
        fused_scan.load_extension.cache_clear()


@needs_kernel
def test_hooks_inside_the_fused_epilogue_see_the_same_model():
    """A hook on ``dt`` or ``ssm_out`` (inside the fused kernel) switches that block to the unfused path."""
    torch.manual_seed(0)
    m = build_model("mamba", vocab_size=11, n_out=5, d_model=24, n_layers=2, d_state=5).double()
    assert m.cfg.scan == "fused"
    tokens = torch.randint(0, 11, (2, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y = m(tokens)
        for point in ("dt", "ssm_out"):
            seen = []
            remove = getattr(m.blocks[1].mixer, point).attach(lambda x, hp: seen.append(tuple(x.shape)))
            y_hooked = m(tokens)
            remove()
            assert seen == [(2, 13, m.cfg.d_inner)], point
            torch.testing.assert_close(y_hooked, y, atol=1e-12, rtol=1e-10)
