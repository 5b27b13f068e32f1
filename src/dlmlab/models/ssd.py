"""Mamba-2 state space duality (SSD) scan in pure PyTorch, single B/C group.

Per head h (scalar decay ``A[h] < 0``), with state [P, N]::

    S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T        S_{-1} = 0
    y_t = S_t C_t

Shapes: ``x`` [B,T,H,P], ``dt`` [B,T,H] (positive, after softplus), ``A`` [H],
``Bm, Cm`` [B,T,N] -> ``y`` [B,T,H,P].

:func:`ssd_scan` is the chunked SSD algorithm (Dao & Gu 2024, "minimal SSD"):
within a chunk of ``chunk`` steps the output is a masked attention-like product
``(C B^T * L) (dt x)`` with the decay matrix ``L = exp(segsum(dt A))``; chunk
states are passed between chunks by a short recurrence over chunks.  Autograd
differentiates it directly.  :func:`ssd_scan_ref` is the sequential recurrence.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check(x, dt, A, Bm, Cm) -> None:
    if x.dim() != 4:
        raise ValueError(f"x must be [B,T,H,P], got {tuple(x.shape)}")
    Bsz, T, H, _ = x.shape
    if tuple(dt.shape) != (Bsz, T, H):
        raise ValueError(f"dt must be [B,T,H]={(Bsz, T, H)}, got {tuple(dt.shape)}")
    if tuple(A.shape) != (H,):
        raise ValueError(f"A must be [H]={(H,)}, got {tuple(A.shape)}")
    if Bm.dim() != 3 or Bm.shape[:2] != (Bsz, T) or Cm.shape != Bm.shape:
        raise ValueError(f"B and C must be [B,T,N] with B,T={(Bsz, T)}, got {tuple(Bm.shape)}, {tuple(Cm.shape)}")


def segsum(a: torch.Tensor) -> torch.Tensor:
    """a [..., L] -> [..., L, L] with out[i, j] = sum_{j < k <= i} a[k] (i >= j), -inf above the diagonal.

    Built from masked cumulative sums (no differences of large cumsums).
    """
    L = a.shape[-1]
    strict = torch.tril(torch.ones(L, L, dtype=torch.bool, device=a.device), diagonal=-1)
    a_kj = a[..., :, None].expand(*a.shape, L).masked_fill(~strict, 0)  # [..., k, j] = a[k] if k > j
    out = torch.cumsum(a_kj, dim=-2)  # [..., i, j] = sum_{k <= i, k > j} a[k]
    keep = torch.tril(torch.ones(L, L, dtype=torch.bool, device=a.device))
    return out.masked_fill(~keep, float("-inf"))


def ssd_scan_ref(x, dt, A, Bm, Cm, return_states: bool = False):
    """Sequential reference; ``return_states`` also returns S [B,T,H,P,N]."""
    _check(x, dt, A, Bm, Cm)
    Bsz, T, H, P = x.shape
    S = x.new_zeros(Bsz, H, P, Bm.shape[-1])
    ys, states = [], []
    for t in range(T):
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]  # [B,H,1,1]
        S = decay * S + (dt[:, t, :, None] * x[:, t])[..., None] * Bm[:, t, None, None, :]
        ys.append(S @ Cm[:, t, None, :, None])
        if return_states:
            states.append(S)
    y = torch.stack(ys, 1)[..., 0] if T else x.new_zeros(x.shape)
    if return_states:
        return y, (torch.stack(states, 1) if T else x.new_zeros(Bsz, 0, H, P, Bm.shape[-1]))
    return y


def ssd_scan(x, dt, A, Bm, Cm, chunk: int = 64):
    """Chunked SSD; equals :func:`ssd_scan_ref` up to rounding."""
    _check(x, dt, A, Bm, Cm)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    Bsz, T, H, P = x.shape
    N = Bm.shape[-1]
    if T == 0:
        return x.new_zeros(x.shape)
    L = min(chunk, T)
    pad = (-T) % L
    xdt = x * dt[..., None]
    a = dt * A  # [B,T,H] log decays
    if pad:
        xdt = F.pad(xdt, (0, 0, 0, 0, 0, pad))
        a = F.pad(a, (0, 0, 0, pad))
        Bm = F.pad(Bm, (0, 0, 0, pad))
        Cm = F.pad(Cm, (0, 0, 0, pad))
    nc = (T + pad) // L
    xdt = xdt.reshape(Bsz, nc, L, H, P)
    a = a.reshape(Bsz, nc, L, H).permute(0, 3, 1, 2)  # [B,H,c,L]
    Bc = Bm.reshape(Bsz, nc, L, N)
    Cc = Cm.reshape(Bsz, nc, L, N)
    a_cum = torch.cumsum(a, dim=-1)  # [B,H,c,L]
    # 1. intra-chunk (diagonal blocks)
    decay = torch.exp(segsum(a))  # [B,H,c,L(l),L(s)]
    scores = torch.einsum("bcln,bcsn->bcls", Cc, Bc)  # [B,c,l,s]
    M = scores[:, None] * decay  # [B,H,c,l,s]
    y = torch.einsum("bhcls,bcshp->bclhp", M, xdt)
    # 2. state contributed by each chunk at its end
    decay_to_end = torch.exp(a_cum[..., -1:] - a_cum)  # [B,H,c,L]
    chunk_states = torch.einsum("bcln,bhcl,bclhp->bchpn", Bc, decay_to_end, xdt)
    # 3. states entering each chunk (recurrence over chunks)
    chunk_decay = torch.exp(a_cum[..., -1])  # [B,H,c]
    entering = []
    S = x.new_zeros(Bsz, H, P, N)
    for c in range(nc):
        entering.append(S)
        S = chunk_decay[:, :, c, None, None] * S + chunk_states[:, c]
    S_in = torch.stack(entering, 1)  # [B,c,H,P,N]
    # 4. contribution of the entering state inside each chunk
    y = y + torch.einsum("bcln,bchpn,bhcl->bclhp", Cc, S_in, torch.exp(a_cum))
    return y.reshape(Bsz, nc * L, H, P)[:, :T]
