"""Fused Mamba-1 selective scan: a C++ kernel (csrc/selective_scan.cpp) built at first use.

Same recurrence, shapes and result as :func:`dlmlab.models.selective_scan.selective_scan`
(``u, dt`` [B,T,Di], ``A`` [Di,N], ``B, C`` [B,T,N] -> ``y`` [B,T,Di]), optionally with the
Mamba block's epilogue fused in (``(y + D u) * silu(z)``, ``D`` [Di], ``z`` [B,T,Di]) and with
``dt`` given before its softplus.  The state lives in a local [N, 64-channel] array per (batch,
channel block), so [B,T,Di,N] is never stored.  Training keeps only checkpoints of the state
every ``chunk`` steps ([B,T/chunk,N,Di]); the backward (one work item per batch row) recomputes
one chunk at a time and runs the adjoint recurrence in reverse time.  Work is split with
torch's intra-op threads; the cross-channel and cross-batch sums of the backward are taken in a
fixed order, so results do not depend on the thread count.

The extension is compiled once per user, source content, flags, torch/Python version and CPU (``-O3
-march=native``) into ``$XDG_CACHE_HOME/dlmlab/fused_scan/<key>`` (``~/.cache`` by default), from a copy of
the sources staged there (so every checkout of one source version shares the build), and loaded from there
afterwards; a build says so in one line on stderr first (``make kernels`` builds ahead).  When it cannot be built (no
compiler, no source file), :func:`fused_selective_scan` warns once and falls back to the
pure-PyTorch chunked scan; tensors off the CPU or of other dtypes take that path silently.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from dlmlab.models.selective_scan import check_scan_inputs, selective_scan

SOURCE = Path(__file__).with_name("csrc") / "selective_scan.cpp"
CFLAGS = ["-O3", "-march=native", "-ffp-contract=fast", "-fopenmp"] + (
    ["-mprefer-vector-width=512"] if platform.machine().lower() in ("x86_64", "amd64") else [])


def _cpu_signature() -> str:
    """The CPU model and feature flags (the build uses -march=native, so it is per CPU)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(next((ln for ln in lines if ln.startswith(k)), "") for k in ("model name", "flags"))
    except OSError:
        return platform.processor() or platform.machine()


def build_dir(source: Path = SOURCE, folder: str = "fused_scan") -> Path:
    """Per-user cache folder for this source's content (and the headers beside it), these flags, this torch
    and Python, and this CPU; not the checkout's path: the kernel is compiled from a copy of the sources
    inside the folder (:func:`stage_sources`), so every clone of one source version shares one build."""
    headers = [h.read_text() for h in sorted(source.parent.glob("*.h"))]
    key = hashlib.sha256("\n".join([source.name, source.read_text(), *headers, " ".join(CFLAGS), torch.__version__,
                                    sys.version, _cpu_signature()]).encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "dlmlab" / folder / key


_STAGED_MTIME = 1_000_000_000  # a fixed, old time: a staged copy never looks newer than a finished build


def stage_sources(source: Path, out: Path) -> Path:
    """Copy ``source`` and the headers beside it into ``out/src`` (once; the folder is keyed by their content)
    and return the copy of ``source``: the build files then name this folder, whichever checkout built it."""
    dest = out / "src"
    dest.mkdir(parents=True, exist_ok=True)
    for f in [source, *sorted(source.parent.glob("*.h"))]:
        target = dest / f.name
        if target.exists():
            continue
        tmp = dest / f".{f.name}.{os.getpid()}.tmp"
        tmp.write_bytes(f.read_bytes())
        os.utime(tmp, (_STAGED_MTIME, _STAGED_MTIME))
        os.replace(tmp, target)
    return dest / source.name


def is_built(name: str, out: Path) -> bool:
    """Whether ``out`` holds the compiled library of extension ``name``."""
    return any(out.glob(f"{name}*.so"))


BUILD_TIME = "10 s on a 2-core machine, minutes when it is busy"  # measured: docs/models.md, "Building"


def build_ops(name: str, source: Path, folder: str, what: str, fallback: str):
    """Compile ``source`` (cached in :func:`build_dir`) and return ``torch.ops.<name>``, or ``None`` after one
    warning "``what`` unavailable (...); using ``fallback``" when it cannot be built (shared by every kernel).
    A build (not a cached load) first says so in one line on stderr."""
    try:
        from torch.utils.cpp_extension import load

        out = build_dir(source, folder)
        staged = stage_sources(source, out)
        if not is_built(name, out):
            print(f"dlmlab: compiling the {what} C++ kernel, once per machine and source version (about "
                  f"{BUILD_TIME}; `make kernels` builds it ahead) into {out}", file=sys.stderr, flush=True)
        load(name=name, sources=[str(staged)], extra_cflags=CFLAGS, extra_ldflags=["-fopenmp"],
             build_directory=str(out), is_python_module=False, verbose=False)
        return getattr(torch.ops, name)
    except Exception as e:  # noqa: BLE001 -- any build failure means: use the fallback
        warnings.warn(f"{what} unavailable ({type(e).__name__}: {str(e).strip()[:300]}); using {fallback}",
                      RuntimeWarning, stacklevel=4)
        return None


@functools.lru_cache(maxsize=None)
def load_extension():
    """The compiled ops (``torch.ops.dlmlab_fused_scan``: ``forward`` / ``backward``), or ``None`` after one warning."""
    return build_ops("dlmlab_fused_scan", SOURCE, "fused_scan", "fused selective scan",
                     "the pure-PyTorch chunked scan")


def available() -> bool:
    """Whether the C++ kernel is built and loadable (builds it on first call)."""
    return load_extension() is not None


class _FusedScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, u, dt, A, B, C, D, z, chunk: int, softplus: bool):
        At = A.t().contiguous()
        dt_used = F.softplus(dt) if softplus else dt  # the backward of softplus is in the kernel's backward
        out, hck, ys = load_extension().forward(u, dt_used, At, B, C, D, z, chunk, True)
        ctx.save_for_backward(u, dt_used, At, B, C, D, z, ys, hck, dt if softplus else u.new_empty(0))
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, gout):
        u, dt_used, At, B, C, D, z, ys, hck, raw = ctx.saved_tensors
        gu, gdt, gAt, gB, gC, gD, gz = load_extension().backward(u, dt_used, At, B, C, D, z, ys, gout.contiguous(),
                                                                   hck, raw, ctx.chunk)
        return gu, gdt, gAt.t(), gB, gC, gD, (gz if z.numel() else None), None, None


def reference_epilogue(y, u, D=None, z=None):
    """``(y + D u) * silu(z)`` in PyTorch (terms left out when ``None``); all [B,T,Di], D [Di]."""
    if D is not None:
        y = y + u * D
    return y if z is None else y * F.silu(z)


def fused_selective_scan(u, dt, A, B, C, D=None, z=None, chunk: int = 16, dt_softplus: bool = False):
    """``(selective_scan(u, dt, A, B, C) + D u) * silu(z)`` with the C++ kernel.

    Shapes: ``u, dt, z`` [B,T,Di], ``A`` [Di,N], ``B, C`` [B,T,N], ``D`` [Di] -> [B,T,Di];
    ``D`` and ``z`` are optional.  ``dt_softplus``: ``dt`` is raw and the scan uses ``softplus(dt)``.  Falls back to the pure-PyTorch chunked scan plus
    :func:`reference_epilogue` (same result) when the kernel is unavailable or the inputs are
    not float32/float64 CPU tensors of one dtype.
    """
    check_scan_inputs(u, dt, A, B, C)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    Di = u.shape[2]
    if D is not None and tuple(D.shape) != (Di,):
        raise ValueError(f"D must be [Di={Di}], got {tuple(D.shape)}")
    if z is not None and z.shape != u.shape:
        raise ValueError(f"z must be [B,T,Di]={tuple(u.shape)}, got {tuple(z.shape)}")
    given = [t for t in (u, dt, A, B, C, D, z) if t is not None]
    usable = ({t.dtype for t in given} in ({torch.float32}, {torch.float64})
              and all(t.device.type == "cpu" for t in given))
    if not usable or u.shape[1] == 0 or load_extension() is None:
        dt = F.softplus(dt) if dt_softplus else dt
        return reference_epilogue(selective_scan(u, dt, A, B, C, chunk=chunk), u, D, z)
    u, dt, A, B, C = (t.contiguous() for t in (u, dt, A, B, C))
    D_ = u.new_zeros(Di) if D is None else D.contiguous()
    z_ = u.new_empty(0) if z is None else z.contiguous()
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in given)):
        dt = F.softplus(dt) if dt_softplus else dt
        return load_extension().forward(u, dt, A.t().contiguous(), B, C, D_, z_, chunk, False)[0]
    return _FusedScan.apply(u, dt, A, B, C, D_, z_, chunk, dt_softplus)
