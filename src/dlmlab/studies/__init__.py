"""The reproducible studies.  Each module ``dlmlab.studies.<name>`` provides

* ``PRESETS``: dict preset name -> typed preset config (``smoke``, ``cpu``, ``paper``);
* ``TITLE``: a human title;
* ``run(preset: str, out: Path, progress: bool = True) -> StudyResult`` that writes
  ``out/results.json``, ``out/report.md`` and ``out/figures/*.png`` (see :mod:`dlmlab.report`).
"""

from __future__ import annotations

import importlib
from types import ModuleType

STUDIES = {
    "induction": "dlmlab.studies.induction",
    "reversal": "dlmlab.studies.reversal",
    "state": "dlmlab.studies.state",
    "prediff": "dlmlab.studies.prediff",
}


def load_study(name: str) -> ModuleType:
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; choose from {sorted(STUDIES)} or 'all'")
    return importlib.import_module(STUDIES[name])


def available() -> list[str]:
    """Studies whose module is present in this installation."""
    out = []
    for name, mod in STUDIES.items():
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                continue
            raise
        out.append(name)
    return out
