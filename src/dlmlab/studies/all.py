"""``dlmlab reproduce all``: run every study into ``OUT/<study>/`` and write one ``OUT/report.html``.

Resumable: a study whose ``OUT/<study>/results.json`` exists with the same preset is reused, not
recomputed; a study that was killed half-way is started again in the same directory, so its own
training checkpoints resume.  Studies that are not installed are reported as *missing*; a study
that raises is recorded with its traceback (``OUT/<study>/error.txt``), the others still run, and
:class:`StudiesFailed` is raised at the end (after the report is written).

``OUT/run_all.json`` (the manifest) records per study: status (``ran``, ``reused``, ``missing``,
``failed``, ``interrupted``, ``pending``), wall time, error and claim counts (holding / total, and per verdict:
reproduced, contradicted, inconclusive and each inconclusive reason), plus the environment.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from dlmlab import outdir, studies
from dlmlab.errors import UserError
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.progress import bar as progress_bar, write as progress_write
from dlmlab.report.claims import claim_tally
from dlmlab.report.html import claims_text, fmt_duration, total_claims_text, write_report
from dlmlab.report.results import load_results
from dlmlab.training.distributed import is_main_process, sync

MANIFEST = "run_all.json"
REPORT = "report.html"


class StudiesFailed(RuntimeError):
    """Some studies crashed or are missing; ``report`` is the (still written) report's path."""

    def __init__(self, message: str, report: Path):
        super().__init__(message)
        self.report = report


class PresetMismatch(UserError, ValueError):
    """The output folder holds results of another preset."""


@dataclass
class StudyRun:
    """One study's outcome in an ``all`` run (a row of the manifest and of the summary)."""

    name: str
    title: str = ""
    status: str = "pending"  # pending | running | ran | reused | missing | failed | interrupted
    wall_time_s: float | None = None
    error: str = ""
    claims_hold: int | None = None
    claims_total: int | None = None
    claims_verdicts: dict[str, int] | None = None  # see dlmlab.report.claims.count_verdicts
    extensions_total: int | None = None  # claims testing what no summary states (not tallied above)
    extensions_verdicts: dict[str, int] | None = None

    def set_claims(self, res: dict) -> None:
        """The claim counts of a results.json (:func:`dlmlab.report.claims.claim_tally`)."""
        for k, v in claim_tally(res.get("claims") or []).items():
            setattr(self, k, v)

    def claims_text(self) -> str:
        """``6: 4 reproduced, 1 contradicted, 1 inconclusive (1 underpowered)``; ``-`` when unknown."""
        return claims_text(asdict(self))


def _load_module(name: str):
    """The study's module, or ``None`` if it is not installed (other import errors propagate)."""
    modname = studies.STUDIES[name]
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name and modname.startswith(e.name):
            return None
        raise


def _read_manifest(out: Path) -> dict:
    p = out / MANIFEST
    if not p.exists():
        return {}
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError:
        return {}


def _finished(out: Path, name: str) -> dict | None:
    """``OUT/<name>/results.json`` if it exists and parses, else ``None``."""
    p = out / name / "results.json"
    if not p.exists():
        return None
    try:
        return load_results(p)
    except ValueError:
        return None


def _check_presets(out: Path, preset: str, names: list[str]) -> None:
    """Refuse to mix presets in one output directory (finished results or half-run checkpoints)."""
    prev = _read_manifest(out).get("preset")
    if prev and prev != preset:
        raise PresetMismatch(
            f"{out} holds a '--preset {prev}' run (see {out / MANIFEST}); "
            f"use another --out for '--preset {preset}' or delete {out}"
        )
    for name in names:
        res = _finished(out, name)
        if res is not None and res.get("preset") != preset:
            raise PresetMismatch(
                f"{out / name / 'results.json'} was made with --preset {res.get('preset')!r}, not {preset!r}; "
                f"use another --out or delete {out / name}"
            )


def full_environment() -> dict:
    """Versions and hardware for the report: python/torch/... versions, CPU, memory, GPU."""
    import torch

    env: dict = {"python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in ["dlmlab", "torch", "numpy", "transformers", "tokenizers", "scikit-learn", "matplotlib",
                "safetensors", "sacrebleu", "mauve-text"]:
        try:
            env[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            env[pkg] = None
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    env["cpu"] = cpu
    env["cpu_count"] = os.cpu_count()
    try:
        env["cpus_usable"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    env["torch_threads"] = torch.get_num_threads()
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        env["memory_gb"] = round(pages * size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    if torch.cuda.is_available():
        env["gpu"] = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        env["cuda"] = torch.version.cuda
    else:
        env["gpu"] = None
    env["world_size"] = int(os.environ.get("WORLD_SIZE", "1"))
    return env


def summary_table(runs: list[StudyRun]) -> str:
    """Plain-text table: study, status, wall time, claims (total: counts per verdict)."""
    rows = [["study", "status", "wall time", "claims"]]
    for r in runs:
        rows.append([r.name, r.status, fmt_duration(r.wall_time_s), r.claims_text()])
    total = sum(r.wall_time_s or 0.0 for r in runs)
    rows.append(["total", "", fmt_duration(total), total_claims_text(asdict(r) for r in runs)])
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(len(lines) - 1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _write_outputs(out: Path, preset: str, runs: list[StudyRun], env: dict, started: float) -> Path:
    manifest = {
        "preset": preset,
        "started": started,
        "updated": time.time(),
        "studies": {r.name: asdict(r) for r in runs},
        "environment": env,
    }
    atomic_write_text(out / MANIFEST, strict_json(manifest, indent=1))
    return write_report(out, manifest)


def run_all(preset: str, out: str | Path, progress: bool = True) -> Path:
    """Run every registered study at ``preset`` into ``out/<study>/``; returns ``out/report.html``.

    Raises :class:`StudiesFailed` (after writing the report) when a study crashed or is missing,
    and a :class:`~dlmlab.errors.UserError` when ``out`` already holds results of another preset or
    is in use by another run (the folder is locked while this runs; each study's folder while it runs).
    """
    out = Path(out)
    with outdir.locked(out, f"reproduce all --preset {preset}"):
        return _run_all(preset, out, progress)


def _run_all(preset: str, out: Path, progress: bool) -> Path:
    names = list(studies.STUDIES)
    main = is_main_process()
    _check_presets(out, preset, names)
    out.mkdir(parents=True, exist_ok=True)
    previous = _read_manifest(out).get("studies", {})
    env = full_environment()
    started = time.time()

    # Decide the whole plan before running anything, so every torchrun rank takes the same decisions.
    runs: list[StudyRun] = []
    modules = {}
    for name in names:
        run = StudyRun(name, title=previous.get(name, {}).get("title") or name)
        runs.append(run)
        try:
            mod = _load_module(name)
        except Exception as e:  # a study that fails at import is a crash, not a missing study
            mod = e
        if mod is not None and not isinstance(mod, Exception):
            run.title = getattr(mod, "TITLE", run.title)
        res = _finished(out, name)
        if res is not None:  # finished earlier with this preset: reuse, never recompute
            run.status = "reused"
            run.set_claims(res)
            prev = previous.get(name, {})
            measured = prev.get("wall_time_s") if prev.get("status") in ("ran", "reused") else None
            run.wall_time_s = measured if measured is not None else res.get("wall_time_s")
        elif isinstance(mod, Exception):
            run.status, run.error = "failed", "import failed:\n" + "".join(traceback.format_exception(mod))
        elif mod is None or not callable(getattr(mod, "run", None)):
            what = "is not installed" if mod is None else "has no run() (incomplete study package)"
            run.status, run.error = "missing", f"module {studies.STUDIES[name]} {what}"
        else:
            modules[name] = mod

    todo = [r for r in runs if r.status == "pending"]
    bar = progress_bar(total=len(runs), initial=len(runs) - len(todo), desc=f"all ({preset})", unit="study",
                       position=0, leave=True, dynamic_ncols=True, disable=not (progress and main), log_every_s=0,
                       bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} studies [{elapsed}{postfix}]")
    log = progress_write if (progress and main) else (lambda s: None)
    for r in runs:
        if r.status != "pending":
            log(f"[{r.name}] {r.status}" + (f": {r.error.splitlines()[-1]}" if r.error else ""))
    if main:
        _write_outputs(out, preset, runs, env, started)

    try:
        for r in todo:
            mod = modules[r.name]
            bar.set_postfix_str(r.name)
            sdir = out / r.name
            sdir.mkdir(parents=True, exist_ok=True)
            r.status = "running"
            if main:
                _write_outputs(out, preset, runs, env, started)
            t0 = time.perf_counter()
            try:
                if preset not in getattr(mod, "PRESETS", {}):
                    raise ValueError(f"study {r.name!r} has no preset {preset!r} "
                                     f"(has {sorted(getattr(mod, 'PRESETS', {}))})")
                with outdir.locked(sdir, f"reproduce all: {r.name}"):
                    result = mod.run(preset, sdir, progress=progress)
                r.wall_time_s = time.perf_counter() - t0
                sync()  # under torchrun: wait until rank 0 has written the study's files
                res = _finished(out, r.name)
                if res is None and not main and hasattr(result, "to_dict"):
                    res = result.to_dict()  # another rank: rank 0 wrote the files, this one has the result
                if res is None:
                    raise RuntimeError(f"study {r.name!r} returned without writing {sdir / 'results.json'}")
                r.status = "ran"
                r.set_claims(res)
                log(f"[{r.name}] done in {fmt_duration(r.wall_time_s)}: claims {r.claims_text()}")
                if main:
                    (sdir / "error.txt").unlink(missing_ok=True)
            except Exception as e:
                r.wall_time_s = time.perf_counter() - t0
                r.status = "failed"
                r.error = "".join(traceback.format_exception(e))
                if main:
                    (sdir / "error.txt").write_text(r.error)
                log(f"[{r.name}] FAILED after {fmt_duration(r.wall_time_s)}: {type(e).__name__}: {e}")
            bar.update(1)
            if main:
                _write_outputs(out, preset, runs, env, started)
    except BaseException:  # KeyboardInterrupt / SystemExit: keep what is done, mark the rest
        for r in runs:
            if r.status in ("pending", "running"):
                r.status = "interrupted"
        if main:
            _write_outputs(out, preset, runs, env, started)
        raise
    finally:
        bar.set_postfix_str("")
        bar.close()

    report = out / REPORT
    if main:
        report = _write_outputs(out, preset, runs, env, started)
        print(summary_table(runs))
    bad = [r for r in runs if r.status in ("failed", "missing")]
    if bad:
        def why(r: StudyRun) -> str:
            last = r.error.strip().splitlines()[-1] if r.error.strip() else ""
            where = f"; traceback in {out / r.name / 'error.txt'}" if (out / r.name / "error.txt").exists() else ""
            return f"{r.name} {r.status} ({last}{where})"

        raise StudiesFailed(f"incomplete reproduction: {', '.join(why(r) for r in bad)}; report: {report}", report)
    return report
