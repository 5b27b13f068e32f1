"""Mamba-2 state space duality (SSD) scan in pure PyTorch, with B/C groups.

Per head h (scalar decay ``A[h] < 0``), reading B/C group ``g = h // (H / G)``, with state [P, N]::

    S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T        S_{-1} = 0
    y_t = S_t C_t

Shapes: ``x`` [B,T,H,P], ``dt`` [B,T,H] (positive, after softplus), ``A`` [H],
``Bm, Cm`` [B,T,N] (one group shared by all heads) or [B,T,G,N] (``H`` a multiple of ``G``;
consecutive heads share a group, as in the reference Mamba-2) -> ``y`` [B,T,H,P].

:func:`ssd_scan` is the chunked SSD algorithm (Dao & Gu 2024, "minimal SSD"):
within a chunk of ``chunk`` steps the output is a masked attention-like product
``(C B^T * L) (dt x)`` with the decay matrix ``L = exp(segsum(dt A))``; chunk
states are passed between chunks by a short recurrence over chunks.  Autograd
differentiates it directly.  :func:`ssd_scan_ref` is the sequential recurrence.  The fast CPU
path, a C++ kernel with a hand-written backward, is :func:`dlmlab.models.ssd_fused.fused_ssd_scan`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _grouped(x, dt, A, Bm, Cm) -> tuple[torch.Tensor, torch.Tensor]:
    """Check shapes; return B and C as [B,T,G,N]."""
    if x.dim() != 4:
        raise ValueError(f"x must be [B,T,H,P], got {tuple(x.shape)}")
    Bsz, T, H, _ = x.shape
    if tuple(dt.shape) != (Bsz, T, H):
        raise ValueError(f"dt must be [B,T,H]={(Bsz, T, H)}, got {tuple(dt.shape)}")
    if tuple(A.shape) != (H,):
        raise ValueError(f"A must be [H]={(H,)}, got {tuple(A.shape)}")
    if Bm.dim() not in (3, 4) or Bm.shape[:2] != (Bsz, T) or Cm.shape != Bm.shape:
        raise ValueError(
            f"B and C must be [B,T,N] or [B,T,G,N] with B,T={(Bsz, T)}, got {tuple(Bm.shape)}, {tuple(Cm.shape)}"
        )
    if Bm.dim() == 3:
        Bm, Cm = Bm[:, :, None], Cm[:, :, None]
    if H % Bm.shape[2]:
        raise ValueError(f"the number of heads ({H}) must be a multiple of the number of B/C groups ({Bm.shape[2]})")
    return Bm, Cm


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
    Bm, Cm = _grouped(x, dt, A, Bm, Cm)
    Bsz, T, H, P = x.shape
    N = Bm.shape[-1]
    Bh = Bm.repeat_interleave(H // Bm.shape[2], dim=2)  # [B,T,H,N]
    Ch = Cm.repeat_interleave(H // Cm.shape[2], dim=2)
    S = x.new_zeros(Bsz, H, P, N)
    ys, states = [], []
    for t in range(T):
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]  # [B,H,1,1]
        S = decay * S + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append(S @ Ch[:, t, :, :, None])
        if return_states:
            states.append(S)
    y = torch.stack(ys, 1)[..., 0] if T else x.new_zeros(x.shape)
    if return_states:
        return y, (torch.stack(states, 1) if T else x.new_zeros(Bsz, 0, H, P, N))
    return y


def ssd_scan(x, dt, A, Bm, Cm, chunk: int = 64):
    """Chunked SSD; equals :func:`ssd_scan_ref` up to rounding.

    Inside, heads are split as H = G x R (group g, head r within the group).
    """
    Bm, Cm = _grouped(x, dt, A, Bm, Cm)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    Bsz, T, H, P = x.shape
    G, N = Bm.shape[2:]
    R = H // G
    if T == 0:
        return x.new_zeros(x.shape)
    L = min(chunk, T)
    pad = (-T) % L
    xdt = x * dt[..., None]
    a = dt * A  # [B,T,H] log decays
    if pad:
        xdt = F.pad(xdt, (0, 0, 0, 0, 0, pad))
        a = F.pad(a, (0, 0, 0, pad))
        Bm = F.pad(Bm, (0, 0, 0, 0, 0, pad))
        Cm = F.pad(Cm, (0, 0, 0, 0, 0, pad))
    nc = (T + pad) // L
    xdt = xdt.reshape(Bsz, nc, L, G, R, P)
    a = a.reshape(Bsz, nc, L, G, R).permute(0, 3, 4, 1, 2)  # [B,G,R,c,L]
    Bc = Bm.reshape(Bsz, nc, L, G, N)
    Cc = Cm.reshape(Bsz, nc, L, G, N)
    a_cum = torch.cumsum(a, dim=-1)  # [B,G,R,c,L]
    # 1. intra-chunk (diagonal blocks)
    decay = torch.exp(segsum(a))  # [B,G,R,c,L(l),L(s)]
    scores = torch.einsum("bclgn,bcsgn->bgcls", Cc, Bc)  # [B,G,c,l,s]
    M = scores[:, :, None] * decay  # [B,G,R,c,l,s]
    y = torch.einsum("bgrcls,bcsgrp->bclgrp", M, xdt)
    # 2. state contributed by each chunk at its end
    decay_to_end = torch.exp(a_cum[..., -1:] - a_cum)  # [B,G,R,c,L]
    chunk_states = torch.einsum("bclgn,bgrcl,bclgrp->bcgrpn", Bc, decay_to_end, xdt)
    # 3. states entering each chunk (recurrence over chunks)
    chunk_decay = torch.exp(a_cum[..., -1])  # [B,G,R,c]
    entering = []
    S = x.new_zeros(Bsz, G, R, P, N)
    for c in range(nc):
        entering.append(S)
        S = chunk_decay[..., c, None, None] * S + chunk_states[:, c]
    S_in = torch.stack(entering, 1)  # [B,c,G,R,P,N]
    # 4. contribution of the entering state inside each chunk
    y = y + torch.einsum("bclgn,bcgrpn,bgrcl->bclgrp", Cc, S_in, torch.exp(a_cum))
    return y.reshape(Bsz, nc * L, H, P)[:, :T]
