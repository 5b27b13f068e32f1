"""The PreDiff study: adapt a pretrained causal LM to masked diffusion (hybrid attention) vs baselines.

``run(preset, out)`` writes results.json, report.md, figures/ and samples.jsonl
(one ``{"prompt", "method", "sample"}`` per line, for ``dlmlab rate``).
"""

from dlmlab.studies.prediff.figures import make_figures
from dlmlab.studies.prediff.presets import PRESETS, PreDiffPreset
from dlmlab.studies.prediff.run import TITLE, run

__all__ = ["TITLE", "PRESETS", "PreDiffPreset", "run", "make_figures"]
