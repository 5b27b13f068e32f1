"""Study: task structure inverts layerwise state encoding.

Transformer, Mamba, Mamba-2, LSTM and GRU (matched parameter counts) are trained to tag
every position of Parity, S3, Dyck and Code-Depth sequences at length 40 and evaluated at
40-120.  Per layer we probe the task state (logistic probes + control task), project out
probe / PCA / random directions, patch activations clean -> corrupted, and ablate Mamba's
Conv1D.  ``run(preset, out)`` writes results.json, report.md and figures/.
"""

from __future__ import annotations

from dlmlab.studies.state.presets import PRESETS, StatePreset
from dlmlab.studies.state.run import run

TITLE = "Task structure inverts layerwise state encoding (Transformer, Mamba, Mamba-2, LSTM, GRU)"

__all__ = ["TITLE", "PRESETS", "StatePreset", "run"]
