"""Build dlmlab's C++ kernels ahead of their first use: ``python -m dlmlab.models.kernels`` (``make kernels``).

The fused Mamba-1 scan (with the causal Conv1D + SiLU) and the fused Mamba-2 SSD scan (with the gated RMSNorm)
are compiled into the per-user cache (:func:`dlmlab.models.fused_scan.build_dir`) and are loaded from there by
every later run on this machine, from any checkout of the same source version.  A kernel that cannot be
built (no compiler) is reported; the models then use the pure-PyTorch scans, so the exit status is 0.
"""

from __future__ import annotations

import sys
import time


def build_all() -> dict[str, bool]:
    """{kernel: whether it is built and loadable}, building those not in the cache yet."""
    from dlmlab.models import fused_scan, ssd_fused

    out = {}
    for name, mod in (("fused selective scan (Mamba)", fused_scan), ("fused SSD scan (Mamba-2)", ssd_fused)):
        t0 = time.perf_counter()
        ok = mod.available()
        out[name] = ok
        print(f"{name}: {'ready' if ok else 'unavailable (the PyTorch scan is used)'} "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return out


def main() -> int:
    build_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
