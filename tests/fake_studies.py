"""Tiny fake study modules for the run-all / report / compare tests (no training, milliseconds)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

from dlmlab import studies
from dlmlab.report import StudyResult, Table, claim, write_study
from dlmlab.report.claims import Judgement
from dlmlab.report.figures import new_figure, save_figure

PKG = "fake_dlmlab_studies"


def make_result(name: str, preset: str, out: Path, holds=(True, False), scale: float = 1.0,
                figures: int = 2) -> StudyResult:
    """A StudyResult with real PNG figures (written under ``out/figures``), a table and claims; ``holds``: per
    claim True / False / None (a verdict from holds alone) or a :class:`Judgement`."""
    figs = []
    for i in range(figures):
        fig, ax = new_figure(width=3.0, height=2.2)
        ax[0, 0].plot([0, 1, 2], [scale, 2 * scale + i, 1.5 * scale])
        ax[0, 0].set_title(f"{name} fig {i}")
        figs.append(save_figure(fig, out, f"fig{i}", f"{name} <figure> {i} & caption"))
    claims = [claim(f"{name}_claim_{i}", f"{name} statement {i} (a < b & c)", _holds(h),
                    judgement=h if isinstance(h, Judgement) else None, gap=0.1 * (i + 1) * scale,
                    per_seed=[1, 2, 3], n=3) for i, h in enumerate(holds)]
    return StudyResult(
        study=name, preset=preset, config={"steps": 10, "name": name},
        results={"loss": 1.0 * scale, "acc": {"ar": 0.5, "mdlm": 0.25 * scale}, "label": "x"},
        tables=[Table(f"{name} main table", ["method", "loss", "acc"],
                      [["ar", 1.25 * scale, 0.5], ["mdlm", 2.5, 0.25 * scale]], note="lower loss is better")],
        figures=figs, claims=claims, wall_time_s=0.01, setup=f"Setup of {name}: trained <nothing> on fake data.",
    )


def _holds(h):
    """``holds`` of a claim given as a bool / None, or as a Judgement (None only when not run)."""
    if not isinstance(h, Judgement):
        return h
    return True if h.verdict == "reproduced" else None if h.reason == "not_run" else False


def make_study(name: str, calls: list | None = None, crash: Exception | None = None, holds=(True, False),
               scale: float = 1.0) -> types.ModuleType:
    mod = types.ModuleType(f"{PKG}.{name}")
    mod.TITLE = f"Fake study {name}"
    mod.PRESETS = {"smoke": {}, "cpu": {}, "paper": {}}

    def run(preset: str, out: Path, progress: bool = True) -> StudyResult:
        if calls is not None:
            calls.append((name, preset))
        if crash is not None:
            raise crash
        res = make_result(name, preset, Path(out), holds=holds, scale=scale)
        write_study(out, res, mod.TITLE)
        return res

    mod.run = run
    return mod


def install(monkeypatch, modules: dict[str, types.ModuleType | None]) -> None:
    """Make ``dlmlab.studies.STUDIES`` the given fakes; a ``None`` entry is a study that is not installed."""
    monkeypatch.setattr(studies, "STUDIES", {n: f"{PKG}.{n}" for n in modules})
    pkg = types.ModuleType(PKG)
    pkg.__path__ = []  # a namespace-like package: absent children raise ModuleNotFoundError
    monkeypatch.setitem(sys.modules, PKG, pkg)
    for n, m in modules.items():
        if m is not None:
            monkeypatch.setitem(sys.modules, f"{PKG}.{n}", m)
        else:
            monkeypatch.delitem(sys.modules, f"{PKG}.{n}", raising=False)
