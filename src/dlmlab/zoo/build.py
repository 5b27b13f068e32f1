"""``make zoo``: retrain every zoo entry from its recorded command and export it into the package.

    python -m dlmlab.zoo.build [NAME ...] [--work runs/zoo] [--reuse]

For each recipe (:data:`dlmlab.zoo.recipes.RECIPES`) the command (``dlmlab``: this environment's) runs from the
repository root with its output
folder under ``--work`` (entries that share a command run it once; ``--reuse`` skips a command whose output
folder already holds the run), then :func:`export` copies the run's latest checkpoint without its optimizer
state, its training curve and the measurements of :mod:`dlmlab.zoo.measure` into ``src/dlmlab/zoo/models/NAME``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from dlmlab.files import atomic_write_text, strict_json
from dlmlab.rundir.checkpoint import latest_checkpoint
from dlmlab.zoo import ROOT
from dlmlab.zoo.recipes import RECIPES, Recipe

REPO = Path(__file__).resolve().parents[3]
CHECKPOINT_FILES = ("model.safetensors", "model.json", "tokenizer.json")


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
        return out.stdout.strip() + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _recorded_wall(out: Path, run: str) -> float | None:
    """The wall time of an existing output folder's command: a study's ``results.json`` records it; for a training
    run, from its ``config.json`` (written when it starts) to its latest checkpoint; ``None`` when neither is there."""
    res = out / "results.json"
    if res.is_file():
        return json.loads(res.read_text()).get("wall_time_s")
    ck = latest_checkpoint(out / run)
    start = out / run / "config.json"
    if ck is not None and start.is_file():
        return (ck / "state.json").stat().st_mtime - start.stat().st_mtime
    return None


def curve(run_dir: Path) -> list[dict]:
    """[{"step", "loss"}] of a run's ``metrics.jsonl`` (the training rows)."""
    rows = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "loss" in r and "step" in r:
            rows.append({"step": int(r["step"]), "loss": float(r["loss"])})
    return rows


def export(name: str, recipe: Recipe, run_dir: Path, wall_time_s: float | None, dest_root: Path = ROOT,
           commit: str | None = None) -> dict:
    """Copy ``run_dir``'s latest checkpoint (no optimizer state) and curve to ``dest_root/name``, measure it,
    write its ``zoo.json`` (``commit``: the code that trained it; default this checkout's); returns the zoo.json
    dict."""
    import dlmlab
    from dlmlab.zoo import measure

    ck = latest_checkpoint(run_dir)
    if ck is None:
        raise FileNotFoundError(f"{run_dir} holds no checkpoint to export")
    dest = dest_root / name
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in CHECKPOINT_FILES:
        src = ck / f if (ck / f).exists() else run_dir / f
        shutil.copy2(src, tmp / f)
    state = json.loads((ck / "state.json").read_text())
    state.pop("optimizer", None)
    (tmp / "state.json").write_text(strict_json(state, indent=1, default=str))
    (tmp / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve(run_dir)))
    shows = getattr(measure, recipe.measure)(dlmlab.load(tmp), recipe.eval)
    info = {"name": name, "description": recipe.description, "command": recipe.command, "run": recipe.run,
            "measure": recipe.measure, "eval": recipe.eval, "commit": commit or _commit(),
            "trained": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "wall_time_s": wall_time_s,
            "step": state.get("step"), "shows": shows}
    atomic_write_text(tmp / "zoo.json", strict_json(info, indent=1))
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return info


DOCS_BEGIN, DOCS_END = "<!-- zoo:begin -->", "<!-- zoo:end -->"


def docs_table() -> str:
    """The zoo's entries as a markdown table (name, what it is, what it shows, how long it took, how)."""
    from dlmlab.zoo import entries

    lines = ["| entry | what it is | shows (at export) | trained by | wall time | commit |", "|---|---|---|---|---|---|"]
    for e in entries():
        shows = "<br>".join(f"{k} {v:.4g}" for k, v in e.shows.items())
        wall = "-" if e.wall_time_s is None else f"{e.wall_time_s / 60:.1f} min"
        lines.append(f"| `zoo:{e.name}` | {e.description} | {shows} | `{' '.join(e.command)}` | {wall} | "
                     f"`{e.commit[:10]}` |")
    return "\n".join(lines)


def write_docs(path: Path) -> None:
    """Replace the text between the zoo markers of ``path`` with :func:`docs_table`."""
    text = path.read_text()
    if DOCS_BEGIN not in text or DOCS_END not in text:
        raise ValueError(f"{path} has no {DOCS_BEGIN} ... {DOCS_END} markers")
    head, rest = text.split(DOCS_BEGIN, 1)
    _, tail = rest.split(DOCS_END, 1)
    atomic_write_text(path, f"{head}{DOCS_BEGIN}\n{docs_table()}\n{DOCS_END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlmlab.zoo.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="entries to rebuild (default: all)")
    ap.add_argument("--work", default="runs/zoo", help="folder for the training runs (default runs/zoo)")
    ap.add_argument("--reuse", action="store_true", help="export a command's existing run instead of retraining")
    ap.add_argument("--docs", default="docs/zoo.md", help="markdown page whose zoo table is rewritten afterwards")
    ap.add_argument("--commit", help="with --reuse: the commit that trained the reused runs (default: this checkout's)")
    a = ap.parse_args(argv)
    unknown = sorted(set(a.names) - set(RECIPES))
    if unknown:
        print(f"error: no zoo recipe {', '.join(unknown)} (known: {', '.join(RECIPES)})", file=sys.stderr)
        return 2
    work = Path(a.work).resolve()
    done: dict[tuple, tuple[Path, float]] = {}  # command -> (output folder, wall time)
    for name in a.names or list(RECIPES):
        r = RECIPES[name]
        key = tuple(r.command)
        if key not in done:
            out = work / r.slug
            t0 = time.perf_counter()
            if a.reuse and latest_checkpoint(out / r.run) is not None:
                wall = _recorded_wall(out, r.run)
            else:
                cmd = [c.replace("{out}", str(out)) for c in r.command]
                cmd[0] = str(Path(sys.executable).with_name(cmd[0])) if cmd[0] == "dlmlab" else cmd[0]
                print(f"[zoo] {name}: {' '.join(r.command)}", flush=True)
                subprocess.run(cmd, cwd=REPO, check=True)
                wall = time.perf_counter() - t0
            done[key] = (out, wall)
        out, wall = done[key]
        info = export(name, r, out / r.run, None if wall is None else round(wall, 1), commit=a.commit)
        print(f"[zoo] {name}: exported step {info['step']}: " +
              ", ".join(f"{k} {v:.4g}" for k, v in info["shows"].items()), flush=True)
    if a.docs:
        write_docs(REPO / a.docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
