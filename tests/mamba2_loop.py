"""Ground truth for Mamba-2: the reference mixer as a plain float64 loop, one time step and one head at a time.

Written from the definition (Dao & Gu 2024; state-spaces/mamba ``Mamba2`` with ``ngroups``,
``norm_before_gate=False``, ``D`` per head), using neither dlmlab's SSD nor Hugging Face's::

    z, xBC, dt_raw = split(in_proj(u), [Di, Di + 2GN, H])
    xBC = silu(b + sum_k w[:, k] * xBC[t - K + 1 + k])     causal depthwise conv, zeros before t = 0
    x [H,P], B [G,N], C [G,N] = split(xBC)                  head h reads group g = h // (H / G)
    dt = softplus(dt_raw[h] + dt_bias[h]);  dA = exp(dt * A[h]),  A = -exp(A_log)
    h_t = dA h_{t-1} + dt x_t B_t^T                        state [P, N] per head, h_{-1} = 0
    y_t = h_t C_t + D[h] x_t
    out = out_proj(weight * rmsnorm_per_group(y * silu(z)))

The parameter names are those of both our ``Mamba2Mixer`` and Hugging Face's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shape:
    d_model: int = 16  # d_inner = n_heads * headdim must be a multiple (HF's expand is an int)
    n_heads: int = 4
    headdim: int = 8
    d_state: int = 8
    n_groups: int = 1
    d_conv: int = 4
    eps: float = 1e-5

    @property
    def d_inner(self) -> int:
        return self.n_heads * self.headdim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state


def random_params(s: Shape, seed: int = 0) -> dict[str, torch.Tensor]:
    """Mixer parameters (float64 values that float32 holds exactly, since HF casts A_log, D, dt_bias to float32)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).float().double()

    Di, H = s.d_inner, s.n_heads
    return {
        "in_proj.weight": rnd(Di + s.conv_dim + H, s.d_model, scale=s.d_model**-0.5),
        "conv1d.weight": rnd(s.conv_dim, 1, s.d_conv, scale=0.5),
        "conv1d.bias": rnd(s.conv_dim, scale=0.1),
        "dt_bias": rnd(H, scale=0.5, shift=-1.5),
        "A_log": rnd(H, scale=0.5, shift=0.3),
        "D": rnd(H, scale=0.5, shift=1.0),
        "norm.weight": rnd(Di, scale=0.3, shift=1.0),
        "out_proj.weight": rnd(s.d_model, Di, scale=Di**-0.5),
    }


def _softplus(v: float) -> float:
    return v + math.log1p(math.exp(-v)) if v > 0 else math.log1p(math.exp(v))


def _silu(v: torch.Tensor) -> torch.Tensor:
    return v / (1 + torch.exp(-v))


def loop_ssd(x, dt, A, Bm, Cm) -> torch.Tensor:
    """x [T,H,P], dt [T,H] (after softplus), A [H], Bm/Cm [T,G,N] -> y_t = h_t C_t [T,H,P] (no D skip)."""
    T, H, P = x.shape
    G, N = Bm.shape[1:]
    y = torch.zeros(T, H, P, dtype=torch.float64)
    for head in range(H):
        g = head // (H // G)
        state = torch.zeros(P, N, dtype=torch.float64)
        for t in range(T):
            d = float(dt[t, head])
            state = math.exp(d * float(A[head])) * state + d * torch.outer(x[t, head], Bm[t, g])
            y[t, head] = state @ Cm[t, g]
    return y


def loop_mixer(p: dict[str, torch.Tensor], s: Shape, u: torch.Tensor) -> torch.Tensor:
    """u [Bsz,T,d_model] -> mixer output [Bsz,T,d_model], float64, one sequence / step / head at a time."""
    Di, H, P, G, N, K = s.d_inner, s.n_heads, s.headdim, s.n_groups, s.d_state, s.d_conv
    A = -torch.exp(p["A_log"])
    w = p["conv1d.weight"][:, 0]  # [conv_dim, K]
    out = torch.zeros(u.shape, dtype=torch.float64)
    for b in range(u.shape[0]):
        proj = u[b].double() @ p["in_proj.weight"].T  # [T, Di + conv_dim + H]
        z, xBC, dt_raw = proj[:, :Di], proj[:, Di:Di + s.conv_dim], proj[:, Di + s.conv_dim:]
        T = proj.shape[0]
        conv = torch.zeros_like(xBC)
        for t in range(T):
            acc = p["conv1d.bias"].clone()
            for k in range(K):
                src = t - K + 1 + k
                if src >= 0:
                    acc = acc + w[:, k] * xBC[src]
            conv[t] = _silu(acc)
        x = conv[:, :Di].reshape(T, H, P)
        Bm = conv[:, Di:Di + G * N].reshape(T, G, N)
        Cm = conv[:, Di + G * N:].reshape(T, G, N)
        dt = torch.tensor([[_softplus(float(dt_raw[t, h] + p["dt_bias"][h])) for h in range(H)] for t in range(T)],
                          dtype=torch.float64)
        y = loop_ssd(x, dt, A, Bm, Cm) + p["D"][None, :, None] * x  # [T,H,P]
        gated = y.reshape(T, Di) * _silu(z)
        size = Di // G
        normed = torch.zeros_like(gated)
        for t in range(T):
            for g in range(G):
                part = gated[t, g * size:(g + 1) * size]
                normed[t, g * size:(g + 1) * size] = part / math.sqrt(float((part**2).mean()) + s.eps)
        out[b] = (normed * p["norm.weight"]) @ p["out_proj.weight"].T
    return out


def inputs(s: Shape, T: int, batch: int = 2, seed: int = 1) -> torch.Tensor:
    """u [batch, T, d_model] float64 (float32-exact values)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, T, s.d_model, generator=g, dtype=torch.float64).float().double()


def hf_mixer(s: Shape, p: dict[str, torch.Tensor], chunk: int):
    """Hugging Face's ``Mamba2Mixer`` (float64 parameters, eval mode) with the parameters ``p``."""
    import transformers
    from transformers.models.mamba2 import modeling_mamba2

    cfg = transformers.Mamba2Config(
        vocab_size=8, hidden_size=s.d_model, state_size=s.d_state, num_hidden_layers=1,
        expand=s.d_inner // s.d_model, head_dim=s.headdim, num_heads=s.n_heads, n_groups=s.n_groups,
        conv_kernel=s.d_conv, chunk_size=chunk, layer_norm_epsilon=s.eps, use_cache=False,
    )
    mixer = modeling_mamba2.Mamba2Mixer(cfg, layer_idx=0).double().eval()
    mixer.load_state_dict(p)
    return mixer


def hf_loop_gap(s: Shape, T: int, chunk: int) -> float:
    """Greatest |HF mixer - loop| on random inputs (HF runs its scan and gated norm in float32)."""
    p, u = random_params(s), inputs(s, T)
    with torch.no_grad():
        hf = hf_mixer(s, p, chunk)(u)
    return float((hf.double() - loop_mixer(p, s, u)).abs().max())


# HF's torch path computes its scan and gated norm in float32; outputs here are O(1).
HF_TOLERANCE = 1e-5


def skip_unless_hf_agrees(s: Shape, T: int, chunk: int):
    """transformers, after checking that its Mamba2Mixer matches the loop; else skip the test naming the gap.

    A comparison with Hugging Face only means something for versions that agree with the ground truth.
    """
    import pytest

    transformers = pytest.importorskip("transformers")
    gap = hf_loop_gap(s, T, chunk)
    if not gap <= HF_TOLERANCE:
        pytest.skip(f"transformers {transformers.__version__} Mamba2Mixer differs from the float64 loop by {gap:.3g}")
    return transformers
