"""Fused C++ SSD scan and gated RMSNorm of Mamba-2: equal to the float64 references (outputs and
gradients, every kernel path: vectorised and generic sizes, groups, chunk lengths, strided inputs),
gradcheck on tiny sizes, float32 close, independent of the thread count, the Mamba-2 model's fused
path equal to its chunked and sequential paths, and the fallback when the kernel cannot be built."""

from __future__ import annotations

import warnings

import pytest
import torch

from dlmlab.models import ssd_fused
from dlmlab.models.fused_gated_norm import gated_norm, reference_gated_norm
from dlmlab.models.mamba2 import Mamba2, Mamba2Config
from dlmlab.models.ssd import ssd_scan, ssd_scan_ref
from dlmlab.models.ssd_fused import fused_ssd_scan

needs_kernel = pytest.mark.skipif(not ssd_fused.available(), reason="fused SSD kernel could not be built")


def _inputs(Bs, T, H, P, N, G, dtype=torch.float64, seed=0):
    """x, dt, A, B, C, D (all requiring grad); B, C [Bs,T,G,N]."""
    g = torch.Generator().manual_seed(seed)
    kw = dict(dtype=torch.float64, generator=g)
    x = torch.randn(Bs, T, H, P, **kw)
    dt = torch.rand(Bs, T, H, **kw) * 0.8 + 0.02
    A = -torch.rand(H, **kw) * 3 - 0.1
    B, C = torch.randn(Bs, T, G, N, **kw), torch.randn(Bs, T, G, N, **kw)
    D = torch.randn(H, **kw)
    return [t.to(dtype).requires_grad_() for t in (x, dt, A, B, C, D)]


def _ref(x, dt, A, B, C, D):
    return ssd_scan_ref(x, dt, A, B, C) + x * D[:, None]


def _grads(fn, args, seed=1):
    y = fn(*args)
    gy = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)).to(y.dtype)
    return y, torch.autograd.grad(y, args, gy)


# (P, N): both vectorised paths (float64: 8 lanes; 32 x 64 is the benchmark's head), and generic sizes
@needs_kernel
@pytest.mark.parametrize("P,N", [(32, 64), (16, 16), (8, 128), (3, 5)])
@pytest.mark.parametrize("G,chunk,T", [(1, 4, 13), (2, 64, 13), (1, 1, 5), (2, 3, 1)])
def test_fused_matches_reference_float64(P, N, G, chunk, T):
    args = _inputs(2, T, 4, P, N, G)
    y_ref, g_ref = _grads(_ref, args)
    y, g = _grads(lambda *a: fused_ssd_scan(*a, chunk=chunk), args)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=1e-10)
    for name, a, b in zip("x dt A B C D".split(), g, g_ref):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-10, msg=name)


@needs_kernel
@pytest.mark.parametrize("P,N,G", [(16, 16, 2), (3, 5, 1)])
def test_gradcheck_tiny(P, N, G):
    args = _inputs(1, 6, 2, P, N, G)
    assert torch.autograd.gradcheck(lambda *a: fused_ssd_scan(*a, chunk=4), args)


@needs_kernel
def test_three_dim_B_C_and_no_D():
    x, dt, A, B, C, _ = _inputs(2, 9, 3, 8, 16, 1)
    y = fused_ssd_scan(x, dt, A, B[:, :, 0], C[:, :, 0], chunk=4)
    torch.testing.assert_close(y, ssd_scan_ref(x, dt, A, B[:, :, 0], C[:, :, 0]), atol=1e-12, rtol=1e-10)


@needs_kernel
def test_float32_close_to_float64():
    args = _inputs(2, 40, 4, 32, 64, 2)
    y_ref, g_ref = _grads(_ref, args)
    y, g = _grads(lambda *a: fused_ssd_scan(*a, chunk=16), [a.detach().float().requires_grad_() for a in args])
    for a, b in zip([y, *g], [y_ref, *g_ref]):
        assert a.dtype == torch.float32
        assert (a.double() - b).abs().max() <= 2e-6 * b.abs().max()


@needs_kernel
def test_strided_inputs_are_read_in_place():
    """x, B, C as slices of one [B,T,.] tensor (as in the Mamba-2 block) give the contiguous result."""
    Bs, T, H, P, G, N = 2, 11, 3, 16, 1, 16
    g = torch.Generator().manual_seed(0)
    xBC = torch.randn(Bs, T, H * P + 2 * G * N + 3, dtype=torch.float64, generator=g).requires_grad_()
    x = xBC[..., : H * P].unflatten(-1, (H, P))
    B = xBC[..., H * P: H * P + G * N].unflatten(-1, (G, N))
    C = xBC[..., H * P + G * N: H * P + 2 * G * N].unflatten(-1, (G, N))
    _, dt, A, _, _, D = _inputs(Bs, T, H, P, N, G)
    y = fused_ssd_scan(x, dt, A, B, C, D, chunk=4)
    (gs,) = torch.autograd.grad(y.sum(), xBC)
    xc, Bc, Cc = (t.detach().contiguous().requires_grad_() for t in (x, B, C))
    yc = fused_ssd_scan(xc, dt, A, Bc, Cc, D, chunk=4)
    assert torch.equal(y, yc)
    gx, gB, gC = torch.autograd.grad(yc.sum(), (xc, Bc, Cc))
    assert torch.equal(gs[..., : H * P], gx.flatten(-2))
    assert torch.equal(gs[..., H * P: H * P + G * N], gB.flatten(-2))
    assert torch.equal(gs[..., H * P + G * N: H * P + 2 * G * N], gC.flatten(-2))


@needs_kernel
def test_results_do_not_depend_on_thread_count():
    old = torch.get_num_threads()
    runs = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            args = _inputs(3, 20, 6, 32, 64, 2, dtype=torch.float32)
            y, g = _grads(lambda *a: fused_ssd_scan(*a, chunk=8), args)
            yz = torch.randn(3, 70, 7, 24, generator=torch.Generator().manual_seed(2))
            w = torch.randn(24, generator=torch.Generator().manual_seed(3))
            o, gn = _grads(lambda a, b, c: gated_norm(a, b, c, 8, 1e-5),
                           [t.requires_grad_() for t in (yz[0], yz[1] * 2, w)])
            runs.append([y, *g, o, *gn])
    finally:
        torch.set_num_threads(old)
    for a, b in zip(*runs):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- gated RMSNorm
@needs_kernel
@pytest.mark.parametrize("D,gs", [(24, 8), (40, 40)])
def test_gated_norm_matches_reference(D, gs):
    g = torch.Generator().manual_seed(0)
    y = torch.randn(3, 5, D, dtype=torch.float64, generator=g, requires_grad=True)
    big = torch.randn(3, 5, D + 7, dtype=torch.float64, generator=g) * 3
    z = big[..., 2: 2 + D].requires_grad_()  # a strided view, as z in the Mamba-2 block
    w = torch.randn(D, dtype=torch.float64, generator=g, requires_grad=True)
    out, grads = _grads(lambda a, b, c: gated_norm(a, b, c, gs, 1e-5), [y, z, w])
    out_ref, grads_ref = _grads(lambda a, b, c: reference_gated_norm(a, b, c, gs, 1e-5), [y, z, w])
    torch.testing.assert_close(out, out_ref, atol=1e-13, rtol=1e-12)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-11)
    assert torch.autograd.gradcheck(lambda a, b, c: gated_norm(a, b, c, gs, 1e-5),
                                    [y[:1, :2].detach().requires_grad_(), z[:1, :2], w])


@needs_kernel
def test_gated_norm_float32_close():
    g = torch.Generator().manual_seed(0)
    y, z = torch.randn(64, 96, generator=g), torch.randn(64, 96, generator=g) * 3
    w = torch.randn(96, generator=g)
    args = [t.requires_grad_() for t in (y, z, w)]
    out, grads = _grads(lambda a, b, c: gated_norm(a, b, c, 32, 1e-5), args)
    out_ref, grads_ref = _grads(lambda a, b, c: reference_gated_norm(a, b, c, 32, 1e-5),
                                [t.detach().double().requires_grad_() for t in args])
    for a, b in zip([out, *grads], [out_ref, *grads_ref]):
        assert (a.double() - b).abs().max() <= 1e-5 * b.abs().max()


def test_gated_norm_rejects_bad_shapes():
    with pytest.raises(ValueError, match="multiple of group_size"):
        gated_norm(torch.randn(2, 6), torch.randn(2, 6), torch.ones(6), 4, 1e-5)


# ---------------------------------------------------------------- the Mamba-2 model
def _tiny(**kw):
    return Mamba2(Mamba2Config(vocab_size=11, n_out=3, d_model=16, n_layers=2, d_state=16, headdim=8, n_groups=2, **kw))


@pytest.mark.parametrize("use_conv", [True, False])
def test_model_fused_equals_chunked_and_sequential(use_conv):
    """Outputs and every parameter gradient (float64), and the hook points the fused path keeps."""
    torch.manual_seed(0)
    m = _tiny(scan_chunk=4, use_conv=use_conv).double()
    assert m.cfg.scan == "fused"  # the default
    tokens = torch.randint(0, 11, (3, 19), generator=torch.Generator().manual_seed(1))
    res = {}
    for scan in ("fused", "chunked", "sequential"):
        m.cfg.scan = scan
        m.zero_grad()
        with m.cache(["blocks.0.mixer.conv_out", "blocks.1.mixer.dt", "blocks.1.mixer.ssm_out"]) as c:
            y = m(tokens)
        y.pow(2).sum().backward()
        res[scan] = [y, *c.values(), *(p.grad.clone() for p in m.parameters())]
    for scan in ("chunked", "sequential"):
        for a, b in zip(res["fused"], res[scan]):
            torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-9)


def test_fallback_when_kernel_unavailable(monkeypatch):
    """Without the kernel: one warning, and the chunked scan and PyTorch gated norm give the reference."""
    from torch.utils import cpp_extension

    def fail(*a, **k):
        raise RuntimeError("no compiler")

    ssd_fused.load_extension.cache_clear()
    monkeypatch.setattr(cpp_extension, "load", fail)
    try:
        args = _inputs(2, 9, 4, 3, 5, 2)
        with pytest.warns(RuntimeWarning, match="fused SSD scan unavailable"):
            y = fused_ssd_scan(*args)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # only once
            y2 = fused_ssd_scan(*args)
            a, b, w = torch.randn(2, 8, dtype=torch.float64), torch.randn(2, 8, dtype=torch.float64), torch.ones(8)
            torch.testing.assert_close(gated_norm(a, b, w.double(), 4, 1e-5),
                                       reference_gated_norm(a, b, w.double(), 4, 1e-5))
        torch.testing.assert_close(y, _ref(*args), atol=1e-12, rtol=1e-10)
        assert torch.equal(y, y2)
        x, dt, A, B, C, D = args
        assert torch.equal(y, ssd_scan(x, dt, A, B, C) + x * D[:, None])
    finally:
        ssd_fused.load_extension.cache_clear()
