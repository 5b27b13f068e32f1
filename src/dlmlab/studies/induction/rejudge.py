"""Re-judge a stored induction results.json with the current claim definitions, beside its stored verdicts.

    python -m dlmlab.studies.induction.rejudge RUN/results.json

prints a markdown table: claim, stored verdict (the definitions of the code that wrote the file), verdict of
the current definitions on the stored measurements, and the deciding detail.  Measurements an older run did not
store (per-sequence accuracies and gains, the +-2 head scores, the full-range probe, 200-draw controls, the
fold's accuracy per position) leave the current definitions without them: the intervals are then undefined
(underpowered), the local heads are +-1 only, and old 20-draw controls are judged as they are (the detail says
so); a model without its ``context`` (written before issue 35) gets the one its label's objective reads.  A fresh
run measures everything.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dlmlab.report.claims import judgement_of
from dlmlab.report.results import Table, markdown_table
from dlmlab.report.seeds import with_seeds
from dlmlab.studies.induction.claims import all_claims
from dlmlab.studies.induction.seeds import SEED_REFS

#: the headline context of each label's objective, for results written before a model's ``context`` was stored
LABEL_CONTEXT = {"ar": "left", "dlm": "both"}


def fill_chance(results: dict, run_root: Path | None = None) -> dict:
    """Models without a stored ``chance`` get it from the config (reserved ids: 1 / n_random) or from their run
    folder's ``run_config.json`` (text ids: 1 / text_vocab), and without a stored ``context`` the one of their
    label (:data:`LABEL_CONTEXT`); the models dict is returned (changed in place)."""
    models = results["results"]["models"]
    cfg = results.get("config", {})
    for key, m in models.items():
        for r in [m, *m.get("seed_runs", [])]:
            r.setdefault("context", LABEL_CONTEXT[r["objective"]])
        if "chance" in m:
            continue
        if cfg.get("random_ids") == "reserved" and cfg.get("n_random"):
            m["chance"] = 1.0 / cfg["n_random"]
        elif run_root is not None and (run_root / "runs" / key / "run_config.json").exists():
            m["chance"] = 1.0 / json.loads((run_root / "runs" / key / "run_config.json").read_text())["text_vocab"]
    return models


def rejudge(results: dict, run_root: Path | None = None) -> list[list]:
    """[[id, stored verdict label, current verdict label, current detail]] for a results.json dict (``run_root``:
    its folder, whose run folders give the chance level of older files)."""
    stored = {c["id"]: judgement_of(c).label() for c in results.get("claims", [])}
    return [[c.id, stored.get(c.id, "-"), c.judgement.label(), c.detail]
            for c in with_seeds(all_claims(fill_chance(results, run_root)), SEED_REFS)]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m dlmlab.studies.induction.rejudge RUN/results.json", file=sys.stderr)
        return 2
    res = json.loads(Path(args[0]).read_text())
    print(markdown_table(Table(f"Induction claims of {args[0]} ({res.get('preset')}): stored verdicts and the "
                               "current definitions on the stored measurements",
                               ["claim", "stored verdict", "current definitions", "detail"],
                               rejudge(res, Path(args[0]).parent))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
