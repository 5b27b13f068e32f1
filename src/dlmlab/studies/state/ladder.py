"""The state study's scale ladder: prefix-task layer profiles at three sizes (``--preset ladder``).

The statistics that only scale can settle are the profile claims' own criteria, as continuous margins
(positive = the study's profile, :func:`late_margin` / :func:`gradual_margin`), for the models the claims name
(Mamba and LSTM: "late"; Transformer: "gradual") on Parity and S3, plus each model's accuracy above its learned
level (whether the precondition holds at that size).  Each size trains the base preset's recipe (steps as caps,
stopping once learned, the same learning rates) at ``d_model`` in ``sizes`` with ``seeds`` seeds, probes every
layer, and reports every statistic per size (t-interval over seeds) with its trend
(:mod:`dlmlab.report.ladder`).  Cells are saved per size (``<out>/d<size>/cells/``) and reused by a rerun.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path


from dlmlab.config import Config, require
from dlmlab.report import StudyResult, Table, write_study
from dlmlab.report.ladder import LadderStat, ladder_figure, ladder_table, trend
from dlmlab.studies.parallel import default_workers, map_jobs
from dlmlab.studies.state.claims_base import (GRADUAL_MAX_SHARE, GRADUAL_MIN_GAIN, gradual_margin, is_learned,
                                              late_margin)
from dlmlab.studies.state.presets import ALL_TASKS, PRESETS, StatePreset

LATE_STAT_ARCHS = ("mamba", "lstm")  # the "late" claim's models
GRADUAL_STAT_ARCHS = ("transformer",)  # the "gradual" claim's model


@dataclass
class LadderPreset(Config):
    """``base``: the state preset whose recipe every size trains (its ``d_model`` is replaced by each of
    ``sizes``); ``seeds`` training seeds per size, architecture and task; ``overrides``: base fields replaced
    for every size (e.g. a tiny test ladder)."""

    base: str = "cpu"
    sizes: list[int] = field(default_factory=lambda: [32, 64, 128])
    seeds: int = 3
    archs: list[str] = field(default_factory=lambda: ["transformer", "mamba", "lstm"])
    tasks: list[str] = field(default_factory=lambda: ["parity", "s3"])
    overrides: dict = field(default_factory=dict)

    def validate(self) -> None:
        require(self.base in PRESETS, f"base must be one of {sorted(PRESETS)}, got {self.base!r}")
        require(len(set(self.sizes)) >= 2 and all(s > 0 for s in self.sizes), "sizes: >= 2 distinct widths")
        require(self.seeds >= 2, f"seeds must be >= 2 (an interval per size), got {self.seeds}")
        require(set(self.tasks) <= set(ALL_TASKS), f"tasks must be among {ALL_TASKS}")

    def preset(self, size: int) -> StatePreset:
        p = dataclasses.replace(PRESETS[self.base], **self.overrides, d_model=size, archs=list(self.archs),
                                tasks=list(self.tasks), conv_ablation=False, pretrain_small="", pretrained_paths=[])
        p.validate()
        return p


LADDERS: dict[str, LadderPreset] = {
    # 3 widths x 3 seeds x (Transformer, Mamba, LSTM) x (Parity, S3) at the cpu recipe: 54 runs, probes only.
    "ladder": LadderPreset(),
    # a tiny ladder for tests: the smoke recipe at two widths, one task (a late and a gradual statistic)
    "ladder_smoke": LadderPreset(base="smoke", sizes=[16, 32], seeds=2, archs=["transformer", "lstm"],
                                 tasks=["parity"], overrides={"default_steps": 10}),
}


def learned_margin(cell) -> float:
    """Accuracy at the training length minus the cell's learned level (>= 0: learned)."""
    L = cell["train_len"]
    return float(cell["acc_by_len"][L] - cell["learned_level"])


#: the study's recurrent baselines reach perfect accuracy on Parity and S3 (002_954919acf31821b2.txt:41): the
#: ladder's rows for them carry the study's value 1 - learned level; the summary gives no number for the others
#: (Mamba, the Transformer: only an ordering) nor for the profile margins
PERFECT_ARCHS, PERFECT_TASKS = ("lstm", "gru"), ("parity", "s3")


def study_accuracy_margin(runs: dict, arch: str, task: str) -> float | None:
    """The study's accuracy minus the learned level for ``arch`` on ``task`` (1 - learned level where the summary
    reports perfect accuracy), else None."""
    if arch not in PERFECT_ARCHS or task not in PERFECT_TASKS:
        return None
    levels = [c["learned_level"] for (_, a, t, _), c in runs.items() if (a, t) == (arch, task)]
    return float(1.0 - levels[0]) if levels else None


def ladder_stats(runs: dict) -> tuple[list[LadderStat], list[LadderStat]]:
    """``runs`` {(size, arch, task, seed): cell} -> (profile statistics, accuracy statistics), one per model and
    task; every seed counts (the accuracy statistics show which sizes learned)."""
    sizes = sorted({k[0] for k in runs})
    pairs = sorted({(a, t) for _, a, t, _ in runs})

    def values(a, t, f):
        return {s: [f(c) for (s_, a_, t_, _), c in sorted(runs.items()) if (s_, a_, t_) == (s, a, t)] for s in sizes}

    prof, acc = [], []
    for a, t in pairs:
        if a in LATE_STAT_ARCHS:
            prof.append(LadderStat(f"{a}/{t} late margin", values(a, t, lambda c: late_margin(
                [x["accuracy"] for x in c["probes"]])), size_label="d_model"))
        if a in GRADUAL_STAT_ARCHS:
            prof.append(LadderStat(f"{a}/{t} gradual margin", values(a, t, gradual_margin), size_label="d_model"))
        acc.append(LadderStat(f"{a}/{t} accuracy - learned level", values(a, t, learned_margin), size_label="d_model",
                              study_value=study_accuracy_margin(runs, a, t)))
    return prof, acc


def _job_keys(lp: LadderPreset) -> list[tuple]:
    return [(a, t, s) for t in lp.tasks for a in lp.archs for s in range(lp.seeds)]


def run_ladder(name: str, out: Path, progress: bool = True) -> StudyResult:
    from dlmlab.studies.state import TITLE
    from dlmlab.studies.state.cells import eval_data, make_task
    from dlmlab.studies.state.run import _cell_job, _cost, availability, load_cell

    lp = dataclasses.replace(LADDERS[name])
    lp.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    presets = {d: lp.preset(d) for d in lp.sizes}
    archs, missing = availability(list(lp.archs), presets[min(lp.sizes)])
    keys = [(d, k) for d in lp.sizes for k in _job_keys(lp) if k[0] in archs]
    runs = {(d,) + k: c for d, k in keys if (c := load_cell(out / f"d{d}", k, presets[d])) is not None}
    todo = sorted(((d, k) for d, k in keys if (d,) + k not in runs), key=lambda dk: -dk[0] * _cost(dk[1], presets[dk[0]]))
    base = presets[min(lp.sizes)]  # evaluation data depend on the task and seed only (the same at every size)
    tasks = {t: make_task(t, base) for t in lp.tasks}
    data = {t: eval_data(task, base) for t, task in tasks.items()} if todo else {}
    jobs = [(k, tasks[k[1]], data[k[1]], presets[d], progress, out / f"d{d}", "probes") for d, k in todo]
    for (d, k), cell in zip(todo, map_jobs(_cell_job, jobs, default_workers(), desc=f"state ({name})",
                                           progress=progress, threads=1)):
        runs[(d,) + k] = cell
    prof, acc = ladder_stats(runs)
    figs = [ladder_figure(prof, out, "ladder_profiles", "Prefix-task profile margins over width (> 0: the study's "
                          "profile; mean and 95% t-interval over seeds)"),
            ladder_figure(acc, out, "ladder_accuracy", "Accuracy above the learned level over width (>= 0: learned)")]
    res = StudyResult(
        study="state", preset=name, config=dataclasses.asdict(lp),
        results={"runs": [dict(c, d_model=d) for (d, *_), c in sorted(runs.items())], "unavailable": missing,
                 "trends": {st.name: trend(st).as_dict() for st in prof + acc},
                 "jobs_cpu_s": float(sum(c.get("cpu_time_s", 0.0) for c in runs.values()))},
        tables=[ladder_table(prof, "Scale ladder: prefix-task layer profiles"),
                ladder_table(acc, "Scale ladder: accuracy above the learned level"), learned_table(runs)],
        figures=figs, claims=[], setup=setup_text(lp, presets, missing))
    res.wall_time_s = time.perf_counter() - t_start
    write_study(out, res, TITLE + " - scale ladder")
    return res


def learned_table(runs: dict) -> Table:
    rows = {}
    for (d, a, t, _), c in sorted(runs.items()):
        r = rows.setdefault((a, t, d), [0, 0, []])
        r[0] += is_learned(c)
        r[1] += 1
        r[2].append(c.get("steps_trained", c["steps"]))
    return Table("Scale ladder: runs that learned their task", ["arch", "task", "d_model", "learned", "steps trained"],
                 [[a, t, d, f"{k} of {n}", ", ".join(map(str, st))] for (a, t, d), (k, n, st) in rows.items()],
                 note="learned: accuracy at the training length >= 90% of the way from chance to perfect; steps: "
                      "trained per seed (the cap is the base preset's; a run stops once learned).")


def setup_text(lp: LadderPreset, presets: dict, missing: dict) -> str:
    p = presets[min(lp.sizes)]
    s = (f"Scale ladder of the state study: {', '.join(lp.archs)} on {', '.join(lp.tasks)} at d_model "
         f"{', '.join(map(str, lp.sizes))} ({p.n_layers} layers; widths of the recurrent models matched to the "
         f"Transformer's parameters at each size), {lp.seeds} seeds each, the '{lp.base}' recipe (steps per "
         "architecture and task as caps, stopping once learned; the same learning rates), probes only. Statistics: "
         "the late margin (jump into the last layer minus the largest earlier jump; > 0 = late) for Mamba and LSTM, "
         f"the gradual margin (min(block gain - {GRADUAL_MIN_GAIN}, {GRADUAL_MAX_SHARE} x gain - largest block step);"
         " > 0 = gradual) for the Transformer, and accuracy minus the learned level, each with a 95% t-interval over "
         "seeds per size and the trend (Welch t of the largest size's margin minus the smallest's).")
    if missing:
        s += " NOT RUN: " + "; ".join(f"{k} ({v})" for k, v in missing.items()) + "."
    return s
