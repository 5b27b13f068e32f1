"""Reversal curse in masked diffusion models: storage-routing study (see docs/reversal.md).

``dlmlab reproduce reversal --preset {smoke,cpu,paper} --out DIR``.
"""

from dlmlab.studies.reversal.presets import PRESETS, ReversalPreset
from dlmlab.studies.reversal.run import TITLE, run, run_preset

__all__ = ["TITLE", "PRESETS", "ReversalPreset", "run", "run_preset"]
