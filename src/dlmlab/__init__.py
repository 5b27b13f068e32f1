"""dlmlab: masked-diffusion LMs beside AR, SSM and RNN models, with mechanistic analysis."""

from __future__ import annotations

__version__ = "0.1.0"


def load(path, dtype=None, device=None, step=None) -> Loaded:  # noqa: F821 (imported on first use)
    """Load a trained run folder, one of its checkpoint folders, or a Hugging Face model folder, in one call.

    Returns a :class:`dlmlab.rundir.load.Loaded` (model in eval mode, tokenizer, the objective it was trained
    with, mask_id, shift_logits, family, source, format); ``step=N`` loads checkpoint N of a run folder; see
    :mod:`dlmlab.rundir.load`.  (Imported on first
    use, so ``import dlmlab`` stays cheap.)
    """
    from dlmlab.rundir.load import load as _load

    return _load(path, dtype=dtype, device=device, step=step)


def __getattr__(name: str):
    if name == "Loaded":
        from dlmlab.rundir.load import Loaded

        return Loaded
    raise AttributeError(f"module 'dlmlab' has no attribute {name!r}")
