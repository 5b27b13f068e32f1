"""The dtype to compute sensitive sums in: at least float32 (half and bfloat16 are upcast), float64 kept.

Norms, analysis means and tables built from positions use it, so a float64 model stays float64
end to end while half-precision models still get float32 accumulations.
"""

from __future__ import annotations

import torch


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16/bfloat16/float32 -> float32; float64 -> float64."""
    return torch.promote_types(dtype, torch.float32)


def upcast(x: torch.Tensor) -> torch.Tensor:
    """``x`` in :func:`compute_dtype` of its dtype."""
    return x.to(compute_dtype(x.dtype))
