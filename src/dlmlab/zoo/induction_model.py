"""Train one model of the induction study's recipe for the zoo, with its training length overridden.

    python -m dlmlab.zoo.induction_model --objective ar --layers 2 --steps 40000 --out DIR

The model, data, objective and schedule are the induction study's ``cpu`` preset (seed 0) trained by the study's
own :func:`~dlmlab.studies.induction.train.train_model`; only ``--steps`` (total steps, the text-only start
unchanged) differs, for a zoo entry whose circuit forms later than the preset's length.  The run folder is
``DIR/run`` (resumed when the same command runs again).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlmlab.zoo.induction_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--objective", choices=("ar", "dlm"), required=True, help="AR (causal) or DLM (masked diffusion)")
    ap.add_argument("--layers", type=int, default=2, help="depth (default 2)")
    ap.add_argument("--steps", type=int, required=True, help="total training steps (the preset's text-only start kept)")
    ap.add_argument("--preset", default="cpu", help="the induction preset whose recipe is trained (default cpu)")
    ap.add_argument("--out", required=True, help="output folder; the run folder is OUT/run")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)
    from dlmlab.studies.induction.presets import PRESETS
    from dlmlab.studies.induction.train import load_data, train_model

    if a.preset not in PRESETS:
        print(f"error: no induction preset {a.preset!r} (known: {', '.join(PRESETS)})", file=sys.stderr)
        return 2
    p = dataclasses.replace(PRESETS[a.preset], steps=a.steps)
    p.validate()
    train_model(p, load_data(p), a.layers, a.objective, Path(a.out) / "run", progress=not a.no_progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
