"""Mamba-1 selective scan in pure PyTorch.

For every batch b, channel d and state n (``A`` is diagonal, negative)::

    h_t = exp(dt_t A) * h_{t-1} + dt_t u_t B_t        h_{-1} = 0
    y_t = sum_n C_t[n] h_t[d, n]

Shapes: ``u, dt`` [B,T,Di] (dt already positive, i.e. after softplus),
``A`` [Di,N], ``B, C`` [B,T,N] -> ``y`` [B,T,Di] (no D skip, no gate).

The Mamba block's default is the fused C++ kernel (:mod:`dlmlab.models.fused_scan`); this
module is its reference and its fallback (``MambaConfig.scan = "chunked"`` / ``"sequential"``).
Two implementations with identical results:

* :func:`selective_scan_ref` -- the plain sequential loop under autograd
  (the recurrence as written; used as the reference in tests).
* :func:`selective_scan` -- the fast one.  It processes the sequence in time
  chunks of ``chunk`` steps: for each chunk the discretised ``exp(dt A)`` and
  ``dt u B`` are built at once ([B,L,Di,N], small enough to stay in cache), the
  recurrence is advanced with one fused ``addcmul`` per step, and the outputs
  are contracted with ``C`` by a batched matmul.  The backward pass is written
  by hand (a reverse scan of the adjoint state with the same chunking) instead
  of recording ~3T autograd nodes; ``exp(dt A)`` is recomputed per chunk
  rather than stored, so only the states h [B,T,Di,N] are kept (none beyond
  one chunk under ``no_grad``).  On CPU this
  is faster than a log2(T)-step parallel (Blelloch) scan, which streams the
  full [B,T,Di,N] tensors through memory ~2 log2(T) times (see
  benchmarks/bench_mamba.py).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

#: intra-op threads used inside the per-step loops.  Each step is a small op
#: ([B,Di,N]); waking extra threads for it costs more than it saves, and on a
#: busy machine one context switch per op (~ms) dominates.  ``None`` leaves
#: torch's setting alone.
LOOP_THREADS: int | None = 1


@contextlib.contextmanager
def _loop_threads() -> Iterator[None]:
    old = torch.get_num_threads()
    if LOOP_THREADS is None or LOOP_THREADS == old:
        yield
        return
    torch.set_num_threads(LOOP_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def check_scan_inputs(u, dt, A, B, C) -> None:
    if u.dim() != 3 or dt.shape != u.shape:
        raise ValueError(f"u and dt must both be [B,T,Di], got {tuple(u.shape)} and {tuple(dt.shape)}")
    if A.dim() != 2 or A.shape[0] != u.shape[2]:
        raise ValueError(f"A must be [Di={u.shape[2]}, N], got {tuple(A.shape)}")
    want = (u.shape[0], u.shape[1], A.shape[1])
    if tuple(B.shape) != want or tuple(C.shape) != want:
        raise ValueError(f"B and C must be [B,T,N]={want}, got {tuple(B.shape)} and {tuple(C.shape)}")


def selective_scan_ref(u, dt, A, B, C, return_states: bool = False):
    """Sequential reference; ``return_states`` also returns h [B,T,Di,N]."""
    check_scan_inputs(u, dt, A, B, C)
    Bsz, T, Di = u.shape
    h = u.new_zeros(Bsz, Di, A.shape[1])
    ys, hs = [], []
    for t in range(T):
        dA = torch.exp(dt[:, t, :, None] * A)
        h = dA * h + (dt[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]
        ys.append((h @ C[:, t, :, None])[..., 0])
        if return_states:
            hs.append(h)
    y = torch.stack(ys, 1) if T else u.new_zeros(Bsz, 0, Di)
    if return_states:
        return y, (torch.stack(hs, 1) if T else u.new_zeros(Bsz, 0, Di, A.shape[1]))
    return y


def _scan_forward(u, dt, A, B, C, chunk: int, keep_states: bool):
    """(y [B,T,Di], states h [B,T,Di,N] or None), no graph.

    Without ``keep_states`` only one chunk of states is alive at a time, so
    inference on long / large batches needs O(B*chunk*Di*N) extra memory.
    """
    Bsz, T, Di = u.shape
    N = A.shape[1]
    H = torch.empty(Bsz, T, Di, N, dtype=u.dtype, device=u.device) if keep_states else None
    y = torch.empty_like(u)
    dtu = dt * u
    prev = None
    for s in range(0, T, chunk):
        e = min(s + chunk, T)
        dA = torch.exp(dt[:, s:e, :, None] * A)  # [B,L,Di,N]
        Hc = H[:, s:e] if keep_states else torch.empty_like(dA)
        torch.mul(dtu[:, s:e, :, None], B[:, s:e, None, :], out=Hc)  # dt u B
        with _loop_threads():
            for i in range(e - s):
                if prev is not None:
                    Hc[:, i].addcmul_(dA[:, i], prev)
                prev = Hc[:, i]
        torch.matmul(Hc, C[:, s:e, :, None], out=y[:, s:e, :, None])
    return y, H


class _SelectiveScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt, A, B, C, chunk: int):
        y, H = _scan_forward(u, dt, A, B, C, chunk, keep_states=True)
        ctx.save_for_backward(u, dt, A, B, C, H)
        ctx.chunk = chunk
        return y

    @staticmethod
    def backward(ctx, gy):
        u, dt, A, B, C, H = ctx.saved_tensors
        chunk = ctx.chunk
        Bsz, T, Di = u.shape
        gy = gy.contiguous()
        dtu = dt * u
        dC = (gy.unsqueeze(-2) @ H).squeeze(-2)  # [B,T,N]
        g_dtu = torch.empty_like(u)
        g_dt = torch.empty_like(dt)
        dB = torch.empty_like(B)
        dA_param = torch.zeros_like(A)
        carry = None  # adjoint of h_{e}: G_{e} * exp(dt_{e} A), passed to the previous chunk
        for e in range(T, 0, -chunk):
            s = max(e - chunk, 0)
            L = e - s
            dA = torch.exp(dt[:, s:e, :, None] * A)  # [B,L,Di,N]
            G = gy[:, s:e, :, None] * C[:, s:e, None, :]  # dL/dh_t direct part
            with _loop_threads():
                for i in range(L - 1, -1, -1):  # G_t += exp(dt_{t+1} A) * G_{t+1}
                    if i == L - 1:
                        if carry is not None:
                            G[:, i].add_(carry)
                    else:
                        G[:, i].addcmul_(dA[:, i + 1], G[:, i + 1])
            carry = dA[:, 0] * G[:, 0] if s > 0 else None
            dB[:, s:e] = (dtu[:, s:e].unsqueeze(-2) @ G).squeeze(-2)
            g_dtu[:, s:e] = (G @ B[:, s:e].unsqueeze(-1)).squeeze(-1)
            # dL/d(dt A)_t = G_t * h_{t-1} * exp(dt_t A)
            if s > 0:
                Hprev = H[:, s - 1:e - 1]
            else:
                Hprev = torch.cat([torch.zeros_like(H[:, :1]), H[:, : e - 1]], 1)
            G.mul_(Hprev).mul_(dA)
            g_dt[:, s:e] = (G * A).sum(-1)
            dA_param += torch.einsum("bldn,bld->dn", G, dt[:, s:e])
        g_u = g_dtu * dt
        g_dt += g_dtu * u
        return g_u, g_dt, dA_param, dB, dC, None


def selective_scan(u, dt, A, B, C, chunk: int = 16):
    """Fast selective scan (chunked, hand-written backward); same result as :func:`selective_scan_ref`."""
    check_scan_inputs(u, dt, A, B, C)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if u.shape[1] == 0:
        return u.new_zeros(u.shape)
    args = [t.contiguous() for t in (u, dt, A, B, C)]
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in args)):
        return _scan_forward(*args, chunk, keep_states=False)[0]  # inference: one chunk of states alive
    return _SelectiveScan.apply(*args, chunk)
