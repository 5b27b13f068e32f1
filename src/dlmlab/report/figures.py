"""Matplotlib helpers (Agg backend, consistent style, atomic PNG writes)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dlmlab.files import atomic_write  # noqa: E402
from dlmlab.ranks import is_main_process  # noqa: E402


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.6, **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)
    return fig, axes


def save_figure(fig, out_dir: str | Path, name: str, caption: str) -> dict:
    """Save ``fig`` to ``out_dir/figures/name.png``; returns ``{"path", "caption"}`` for results.json.

    Under ``torchrun`` only rank 0 writes (every rank returns the same entry).
    """
    entry = {"path": f"figures/{name}.png", "caption": caption}
    if not is_main_process():
        plt.close(fig)
        return entry
    figdir = Path(out_dir) / "figures"
    figdir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    try:
        atomic_write(figdir / f"{name}.png", lambda tmp: fig.savefig(tmp, dpi=110))
    finally:
        plt.close(fig)
    return entry
