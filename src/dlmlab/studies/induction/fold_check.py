"""The folded no-LayerNorm model's accuracy for trained run folders of the study, the study's fold beside the old one.

    python -m dlmlab.studies.induction.fold_check DIR/runs/ar_L2 DIR/runs/dlm_L2

loads each run's last checkpoint (``dlmlab.load``), rebuilds the study's evaluation rows from the run's
``run_config.json`` (its preset) and prints a markdown table: the model's forward accuracy, the accuracy of the
study's fold (scales frozen per position; DLM: per position and mask / other token) and of the old fold (one
frozen scale per norm), with the KL and arg-max agreement of the study's fold (``analyse.fold_and_measure``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch

from dlmlab.report.results import Table, markdown_table
from dlmlab.studies.induction.analyse import accuracy_fn, fold_and_measure
from dlmlab.studies.induction.presets import InductionPreset
from dlmlab.studies.induction.train import StudyObjective, load_data
from dlmlab.studies.threads import torch_threads
from dlmlab.tasks.repeated import repeated_tokens


def check(run_dir: str | Path) -> dict:
    """{run, objective, step, accuracy, folded_accuracy, single_scale_folded_accuracy, mean_kl, argmax_agreement}."""
    import dlmlab
    from dlmlab.analysis import induction

    run_dir = Path(run_dir)
    cfg = json.loads((run_dir / "run_config.json").read_text())
    known = {f.name for f in dataclasses.fields(InductionPreset)}
    p = InductionPreset(**{k: v for k, v in cfg["preset"].items() if k in known})
    loaded = dlmlab.load(run_dir)
    obj = StudyObjective(cfg["objective"], loaded.objective)  # the run's label and the objective it saved
    model = loaded.model.eval()
    data = load_data(p)
    with torch_threads(p.threads):
        eval_tokens = repeated_tokens(p.eval_seqs, p.seq_len // 2, data.lo, data.hi,
                                      torch.Generator().manual_seed(p.seed + 1), distinct=True)
        rows = induction.build_rows(eval_tokens, obj.mask_id, "forward", "both", p.per_seq,
                                    seed=p.seed).noisy if obj.masked else None
        _, f = fold_and_measure(model, obj, eval_tokens, rows, accuracy_fn(obj, eval_tokens, p.per_seq, p.seed))
    step = json.loads((run_dir / "checkpoints" / "latest.json").read_text()).get("step")
    return {"run": str(run_dir), "objective": obj.label, "step": step, **f}


def table(rows: list[dict]) -> Table:
    return Table("Folded no-LayerNorm model: forward accuracy of the model, the study's fold (scales per position; "
                 "DLM: and mask / other token) and the old fold (one scale per norm)",
                 ["run", "step", "accuracy", "folded accuracy (per position)", "folded accuracy (one scale, old)",
                  "mean KL", "argmax agreement"],
                 [[r["run"], r["step"], r["accuracy"], r["folded_accuracy"], r["single_scale_folded_accuracy"],
                   r["mean_kl"], r["argmax_agreement"]] for r in rows])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m dlmlab.studies.induction.fold_check RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    print(markdown_table(table([check(a) for a in args])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
