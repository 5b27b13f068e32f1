"""Mamba-2 against ground truth: our SSD scans (chunked, sequential, fused C++), our mixer and HF's mixer vs a float64 loop.

The loop (tests/mamba2_loop.py) follows the definition step by step.  Cases include a padded last
chunk (T not a multiple of the chunk) and n_groups > 1.
"""

from __future__ import annotations

import math

import pytest
import torch

from dlmlab.models.mamba2 import Mamba2Config, Mamba2Mixer
from dlmlab.models.ssd import ssd_scan, ssd_scan_ref
from dlmlab.models.ssd_fused import fused_ssd_scan
from mamba2_loop import Shape, inputs, loop_mixer, loop_ssd, random_params, skip_unless_hf_agrees

CHUNK = 8
CASES = [(T, G) for T in (8, 21) for G in (1, 2)]  # 21 = 2 full chunks of 8 + a padded one


def test_loop_single_step_by_hand():
    """T = 1 from the formula: h = dt x B^T, y = h C + D x, then the gated norm and projections."""
    s = Shape(d_model=3, n_heads=2, headdim=2, d_state=2, n_groups=1, d_conv=1)
    p = random_params(s, seed=3)
    u = inputs(s, T=1, batch=1, seed=4)
    Di = s.d_inner
    proj = p["in_proj.weight"] @ u[0, 0]
    z, xBC, dt_raw = proj[:Di], proj[Di:Di + s.conv_dim], proj[Di + s.conv_dim:]
    xBC = torch.nn.functional.silu(p["conv1d.weight"][:, 0, 0] * xBC + p["conv1d.bias"])
    x, Bv, Cv = xBC[:Di].reshape(2, 2), xBC[Di:Di + 2], xBC[Di + 2:]
    y = torch.stack([
        math.log1p(math.exp(float(dt_raw[h] + p["dt_bias"][h]))) * x[h] * float(Bv @ Cv) + p["D"][h] * x[h]
        for h in range(2)
    ]).reshape(Di) * torch.nn.functional.silu(z)
    y = y / torch.sqrt((y**2).mean() + s.eps) * p["norm.weight"]
    torch.testing.assert_close(loop_mixer(p, s, u)[0, 0], p["out_proj.weight"] @ y, atol=1e-14, rtol=1e-13)


def _scan_inputs(T: int, G: int, H: int = 4, P: int = 3, N: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    kw = dict(dtype=torch.float64, generator=g)
    return (torch.randn(2, T, H, P, **kw), torch.rand(2, T, H, **kw) * 0.8 + 0.02, -torch.rand(H, **kw) * 2 - 0.1,
            torch.randn(2, T, G, N, **kw), torch.randn(2, T, G, N, **kw))


@pytest.mark.parametrize("T,G", CASES)
def test_ssd_scans_match_loop(T, G):
    x, dt, A, Bm, Cm = _scan_inputs(T, G)
    want = torch.stack([loop_ssd(x[b], dt[b], A, Bm[b], Cm[b]) for b in range(2)])
    torch.testing.assert_close(ssd_scan(x, dt, A, Bm, Cm, chunk=CHUNK), want, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(ssd_scan_ref(x, dt, A, Bm, Cm), want, atol=1e-12, rtol=1e-12)
    # the C++ kernel (or, without a compiler, its fallback: the chunked scan)
    torch.testing.assert_close(fused_ssd_scan(x, dt, A, Bm, Cm, chunk=CHUNK), want, atol=1e-12, rtol=1e-12)


def test_ssd_single_group_layouts_agree():
    """B/C given as [B,T,N] mean one group shared by all heads."""
    x, dt, A, Bm, Cm = _scan_inputs(21, 1)
    torch.testing.assert_close(ssd_scan(x, dt, A, Bm[:, :, 0], Cm[:, :, 0], chunk=CHUNK),
                               ssd_scan(x, dt, A, Bm, Cm, chunk=CHUNK), atol=0, rtol=0)


def test_ssd_rejects_heads_not_multiple_of_groups():
    x, dt, A, Bm, Cm = _scan_inputs(5, 3)
    with pytest.raises(ValueError, match="multiple of the number of B/C groups"):
        ssd_scan(x, dt, A, Bm, Cm)


@pytest.mark.parametrize("scan", ["fused", "chunked", "sequential"])
@pytest.mark.parametrize("T,G", CASES)
def test_our_mixer_matches_loop(T, G, scan):
    s = Shape(n_groups=G)
    cfg = Mamba2Config(vocab_size=8, d_model=s.d_model, d_state=s.d_state, d_inner=s.d_inner, headdim=s.headdim,
                       n_groups=G, d_conv=s.d_conv, norm_eps=s.eps, scan=scan, scan_chunk=CHUNK)
    mixer = Mamba2Mixer(cfg).double()
    p, u = random_params(s), inputs(s, T)
    mixer.load_state_dict(p)
    with torch.no_grad():
        torch.testing.assert_close(mixer(u), loop_mixer(p, s, u), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("T,G", CASES)
def test_hf_mixer_matches_loop(T, G):
    """Hugging Face's Mamba2Mixer (torch path) against the loop; a disagreement is HF's, reported as a skip."""
    skip_unless_hf_agrees(Shape(n_groups=G), T, CHUNK)
