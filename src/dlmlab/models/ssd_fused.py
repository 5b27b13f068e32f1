"""Fused Mamba-2 (SSD) scan: a C++ kernel (csrc/ssd_scan.cpp) built at first use.

Same recurrence and shapes as :func:`dlmlab.models.ssd.ssd_scan_ref`, with the ``D`` skip fused in::

    S_t = exp(dt_t A[h]) S_{t-1} + dt_t x_t B_t^T,    y_t = S_t C_t + D[h] x_t

``x`` [B,T,H,P], ``dt`` [B,T,H] (after softplus), ``A, D`` [H], ``Bm, Cm`` [B,T,N] or [B,T,G,N] ->
``y`` [B,T,H,P].  The kernel runs the recurrence step by step per (batch, head) with the state
in a local array ([N,P], vectorised over P, in the forward; [P,N], vectorised over N, in the
backward), so neither [B,T,H,P,N] nor the chunked algorithm's [B,H,c,L,L] decay matrices are
stored.  Training keeps only checkpoints of the state every ``chunk`` steps
([B,H,ceil(T/chunk)-1,P,N]: before every chunk but the first); the backward recomputes one chunk
at a time and runs the adjoint recurrence in reverse time.  Work is split with torch's intra-op
threads over (batch, head) in the forward and (batch, group) in the backward, whose heads run in
order and add their dB, dC; dA, dD are summed over the batch afterwards in a fixed order, so
results do not depend on the thread count.  ``x``, ``Bm``, ``Cm`` may be strided over batch and
time (slices of the Mamba-2 block's ``xBC``): they are read in place, not copied.

The extension is compiled once per user, source content, flags, torch/Python version and CPU (the same
flags, cache root, staged sources and one-line notice as :mod:`dlmlab.models.fused_scan`) into
``$XDG_CACHE_HOME/dlmlab/ssd_scan/<key>`` and loaded from there afterwards.  When it cannot be
built, :func:`fused_ssd_scan` warns once and falls back to the pure-PyTorch chunked
:func:`~dlmlab.models.ssd.ssd_scan`; tensors off the CPU or of other dtypes take that path silently.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from dlmlab.models.fused_scan import build_ops
from dlmlab.models.ssd import _grouped, ssd_scan

SOURCE = Path(__file__).with_name("csrc") / "ssd_scan.cpp"


@functools.lru_cache(maxsize=None)
def load_extension():
    """The compiled ops (``torch.ops.dlmlab_ssd``: ``forward`` / ``backward``), or ``None`` after one warning."""
    return build_ops("dlmlab_ssd", SOURCE, "ssd_scan", "fused SSD scan", "the pure-PyTorch chunked SSD scan")


def available() -> bool:
    """Whether the C++ kernel is built and loadable (builds it on first call)."""
    return load_extension() is not None


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` [B,T,K,M] as is when each [K,M] row is contiguous (strides over B and T are free), else a copy."""
    return t if t.stride(3) == 1 and (t.shape[2] == 1 or t.stride(2) == t.shape[3]) else t.contiguous()


class _FusedSSD(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dt, A, Bm, Cm, D, chunk: int):
        y, hck = load_extension().forward(x, dt, A, Bm, Cm, D, chunk, True)
        ctx.save_for_backward(x, dt, A, Bm, Cm, D, hck)
        ctx.chunk = chunk
        return y

    @staticmethod
    def backward(ctx, gy):
        x, dt, A, Bm, Cm, D, hck = ctx.saved_tensors
        gx, gdt, gA, gB, gC, gD = load_extension().backward(x, dt, A, Bm, Cm, D, gy.contiguous(), hck, ctx.chunk)
        return gx, gdt, gA, gB, gC, gD, None


def fused_ssd_scan(x, dt, A, Bm, Cm, D=None, chunk: int = 16):
    """``ssd_scan(x, dt, A, Bm, Cm) + D[h] x`` with the C++ kernel.

    Shapes: ``x`` [B,T,H,P], ``dt`` [B,T,H], ``A`` [H], ``Bm, Cm`` [B,T,N] or [B,T,G,N], ``D`` [H]
    (optional) -> [B,T,H,P].  ``chunk``: checkpoint interval of the backward.  Falls back to the
    pure-PyTorch chunked scan (equal up to rounding) when the kernel is unavailable or the inputs
    are not float32/float64 CPU tensors of one dtype.
    """
    squeeze = Bm.dim() == 3
    Bm, Cm = _grouped(x, dt, A, Bm, Cm)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    H = x.shape[2]
    if D is not None and tuple(D.shape) != (H,):
        raise ValueError(f"D must be [H]={(H,)}, got {tuple(D.shape)}")
    given = [t for t in (x, dt, A, Bm, Cm, D) if t is not None]
    usable = ({t.dtype for t in given} in ({torch.float32}, {torch.float64})
              and all(t.device.type == "cpu" for t in given))
    if not usable or x.shape[1] == 0 or load_extension() is None:
        y = ssd_scan(x, dt, A, Bm[:, :, 0] if squeeze else Bm, Cm[:, :, 0] if squeeze else Cm)
        return y if D is None else y + x * D[:, None]
    x, Bm, Cm = _rows(x), _rows(Bm), _rows(Cm)  # slices of one projection are read in place
    dt, A = dt.contiguous(), A.contiguous()
    D_ = x.new_zeros(H) if D is None else D.contiguous()
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in given)):
        return load_extension().forward(x, dt, A, Bm, Cm, D_, chunk, False)[0]
    return _FusedSSD.apply(x, dt, A, Bm, Cm, D_, chunk)
