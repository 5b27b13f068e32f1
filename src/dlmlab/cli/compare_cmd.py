"""dlmlab compare DIR_A DIR_B: how two reproduction runs' results and claims differ, or two training runs.

Each DIR is a single-study output (``DIR/results.json``) or an ``all`` output (``DIR/<study>/results.json``
plus ``DIR/run_all.json``).  A single study is compared with the same study of an ``all`` run.
Two ``dlmlab train`` runs (or checkpoints, anything :func:`dlmlab.load` loads from a run) are compared as
one section ``train``: the loaded model (family, objective, parameter count, step), ``eval.json``, the
last ``metrics.jsonl`` row and every ``config.json`` field.
Printed per study: claims that flipped (``holds`` changed, with their evidence side by side), claims
whose verdict or its reason changed while ``holds`` did not (e.g. ``pe_ordering: inconclusive (underpowered)
-> contradicted``; a results.json written before verdicts reads as its ``holds`` implies), claims present on one
side only, numeric results that differ (``results`` and table cells, largest relative difference
first), other changed values, and studies present in one run only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlmlab.errors import UserError
from dlmlab.rundir.load import is_training_run
from dlmlab.report.claims import judgement_of
from dlmlab.report.results import fmt, load_results as _load_results


@dataclass
class Run:
    path: Path
    kind: str  # "study" | "all" | "train"
    studies: dict[str, dict]  # name -> results.json
    status: dict[str, str] = field(default_factory=dict)  # name -> status from the manifest (all runs)
    preset: str | None = None
    walls: dict[str, float] = field(default_factory=dict)  # name -> wall time measured by `reproduce all`


def load_results(path: Path) -> dict:
    """``path``'s results.json; a missing or corrupt file raises :class:`UserError` naming it."""
    try:
        res = _load_results(path)
    except (OSError, ValueError) as e:  # missing, unreadable or not JSON (the message names the file)
        raise UserError(str(e)) from None
    if not isinstance(res, dict):
        raise UserError(f"{path / 'results.json'} is not a dlmlab results file (expected a JSON object)")
    return res


def _json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: line {e.lineno} column {e.colno} is not valid JSON ({e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def _last_metrics(path: Path) -> dict:
    """The last complete JSON row of ``metrics.jsonl`` (``{}`` when there is none)."""
    if not path.is_file():
        return {}
    for line in reversed(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a row cut by a kill
        if isinstance(row, dict):
            return row
    return {}


def load_train_run(path: Path) -> Run:
    """A ``dlmlab train`` run (or checkpoint) as a one-section run ``train``: what :func:`dlmlab.load` says
    of its model, ``eval.json``, the last ``metrics.jsonl`` row and ``config.json``."""
    from dlmlab import load
    from dlmlab.models.factory import count_params

    loaded = load(path)
    run_dir = path.parent.parent if loaded.format == "checkpoint" and path.parent.name == "checkpoints" else path
    results: dict[str, Any] = {"model": {
        "family": loaded.family, "objective": loaded.objective_name, "params": count_params(loaded.model),
        "step": loaded.step, "mask_id": loaded.mask_id,
        "vocab": getattr(loaded.tokenizer, "vocab_size", None)}}
    if (run_dir / "eval.json").is_file():
        results["eval"] = _json_file(run_dir / "eval.json")
    last = _last_metrics(run_dir / "metrics.jsonl")
    if last:
        results["last_metrics"] = last
    if (run_dir / "config.json").is_file():
        results["config"] = _json_file(run_dir / "config.json")
    return Run(path, "train", {"train": {"study": "train", "results": results}})


def load_run(path: str | Path) -> Run:
    """A run directory of either layout, or a training run; raises :class:`UserError` naming what was looked for."""
    path = Path(path)
    if not path.is_dir():
        why = "a file" if path.exists() else "nothing there"
        raise UserError(f"{path} is not a directory ({why}); give a folder written by `dlmlab reproduce` "
                        "or `dlmlab train`")
    if not (path / "results.json").exists() and is_training_run(path):
        return load_train_run(path)
    if (path / "results.json").exists():
        res = load_results(path)
        return Run(path, "study", {res.get("study") or path.name: res}, preset=res.get("preset"))
    studies = {}
    for sub in sorted(p for p in path.iterdir() if p.is_dir()):
        if (sub / "results.json").exists():
            res = load_results(sub)
            studies[res.get("study") or sub.name] = res
    status, preset, walls = {}, None, {}
    manifest = path / "run_all.json"
    if manifest.exists():
        man = _json_file(manifest)
        if not isinstance(man, dict):
            raise UserError(f"{manifest} is not a `reproduce all` manifest (expected a JSON object)")
        preset = man.get("preset")
        status = {n: s.get("status", "?") for n, s in (man.get("studies") or {}).items()}
        walls = {n: s["wall_time_s"] for n, s in (man.get("studies") or {}).items() if s.get("wall_time_s")}
    if not studies and not status:
        raise UserError(f"no results.json in {path} or in its study folders, and no model.json or checkpoints/ "
                        "(give a folder written by `dlmlab reproduce` or `dlmlab train`)")
    if preset is None and studies:
        preset = next(iter(studies.values())).get("preset")
    return Run(path, "all", studies, status, preset, walls)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def flatten(res: dict) -> dict[str, Any]:
    """Scalar leaves of ``results`` (dotted keys) and of every table cell (``table[title][row][column]``)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(x, list) and len(x) <= 64:
            for i, v in enumerate(x):
                walk(f"{prefix}[{i}]", v)
        elif isinstance(x, list):
            out[prefix] = f"<list of {len(x)}>"
        else:
            out[prefix] = x

    walk("", res.get("results") or {})
    for t in res.get("tables") or []:
        cols = t.get("columns") or []
        for r, row in enumerate(t.get("rows") or []):
            keyed = bool(row) and isinstance(row[0], str)  # first column names the row
            label, cells = (row[0], zip(cols[1:], row[1:])) if keyed else (r, zip(cols, row))
            for c, v in cells:
                out[f"table[{t.get('title', '')}][{label}][{c}]"] = v
    return out


@dataclass
class StudyDiff:
    name: str
    only_in: str | None = None  # "A" / "B" when the study is present in one run only
    presets: tuple = (None, None)
    walls: tuple = (None, None)
    flipped: list[tuple[dict, dict]] = field(default_factory=list)  # holds changed
    reverdicted: list[tuple[dict, dict]] = field(default_factory=list)  # same holds, verdict or reason changed
    same_claims: int = 0
    claims_only: dict[str, list[str]] = field(default_factory=lambda: {"A": [], "B": []})
    numeric: list[tuple[str, float, float]] = field(default_factory=list)  # key, a, b
    changed: list[tuple[str, Any, Any]] = field(default_factory=list)
    keys_only: dict[str, list[str]] = field(default_factory=lambda: {"A": [], "B": []})
    n_compared: int = 0

    @property
    def differs(self) -> bool:
        return bool(self.only_in or self.flipped or self.reverdicted or self.numeric or self.changed
                    or self.claims_only["A"] or self.claims_only["B"] or self.keys_only["A"] or self.keys_only["B"])


def _rel(a: float, b: float) -> float:
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


def diff_study(name: str, a: dict, b: dict, rtol: float = 1e-9) -> StudyDiff:
    d = StudyDiff(name, presets=(a.get("preset"), b.get("preset")), walls=(a.get("wall_time_s"), b.get("wall_time_s")))
    ca = {c["id"]: c for c in a.get("claims") or []}
    cb = {c["id"]: c for c in b.get("claims") or []}
    for cid, c in ca.items():
        if cid not in cb:
            d.claims_only["A"].append(cid)
        elif c.get("holds") != cb[cid].get("holds"):
            d.flipped.append((c, cb[cid]))
        elif _verdict_key(c) != _verdict_key(cb[cid]):
            d.reverdicted.append((c, cb[cid]))
        else:
            d.same_claims += 1
    d.claims_only["B"] = [cid for cid in cb if cid not in ca]
    fa, fb = flatten(a), flatten(b)
    for k, va in fa.items():
        if k not in fb:
            d.keys_only["A"].append(k)
            continue
        vb = fb[k]
        d.n_compared += 1
        if _is_num(va) and _is_num(vb):
            if (math.isnan(va) and math.isnan(vb)) or _rel(float(va), float(vb)) <= rtol:
                continue
            d.numeric.append((k, float(va), float(vb)))
        elif va != vb:
            d.changed.append((k, va, vb))
    d.keys_only["B"] = [k for k in fb if k not in fa]
    d.numeric.sort(key=lambda t: -_rel(t[1], t[2]) if not (math.isnan(t[1]) or math.isnan(t[2])) else -math.inf)
    return d


def compare(a: Run, b: Run, rtol: float = 1e-9) -> list[StudyDiff]:
    from dlmlab.studies import STUDIES

    names = list(a.studies) + [n for n in b.studies if n not in a.studies]
    names += [n for n in list(a.status) + list(b.status) if n not in names]
    names = list(dict.fromkeys(names))
    if a.kind == "study" and b.kind == "all" or a.kind == "all" and b.kind == "study":
        single = a if a.kind == "study" else b
        names = list(single.studies)  # compare one study with its counterpart in the `all` run
    order = {n: i for i, n in enumerate(STUDIES)}
    names.sort(key=lambda n: order.get(n, len(order)))
    diffs = []
    for n in names:
        ra, rb = a.studies.get(n), b.studies.get(n)
        if ra is not None and rb is not None:
            d = diff_study(n, ra, rb, rtol)
            d.walls = (a.walls.get(n, d.walls[0]), b.walls.get(n, d.walls[1]))
            diffs.append(d)
        else:
            diffs.append(StudyDiff(n, only_in="A" if ra is not None else ("B" if rb is not None else "neither")))
    return diffs


def _v(x: Any) -> str:
    if _is_num(x) and isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, (dict, list)):
        s = json.dumps(x)
        return s if len(s) < 60 else s[:57] + "..."
    return fmt(x)


def _holds(h: Any) -> str:
    return "n/a" if h is None else ("holds" if h else "does not hold")


def _verdict_key(c: dict) -> tuple[str, str | None]:
    j = judgement_of(c)
    return j.verdict, j.reason


def _verdict(c: dict) -> str:
    """``reproduced`` / ``contradicted`` / ``inconclusive (underpowered)`` of a results.json claim."""
    return judgement_of(c).label()


def _claim_lines(ca: dict, cb: dict) -> list[str]:
    """The evidence and verdict detail that differ between two versions of a claim, one line each."""
    lines = []
    ev_a, ev_b = ca.get("evidence") or {}, cb.get("evidence") or {}
    for k in list(dict.fromkeys([*ev_a, *ev_b])):
        if ev_a.get(k) != ev_b.get(k):
            lines.append(f"      {k}: {_v(ev_a.get(k))} -> {_v(ev_b.get(k))}")
    da, db = judgement_of(ca).detail, judgement_of(cb).detail
    if da != db:
        lines.append(f"      detail: {da or '-'} -> {db or '-'}")
    return lines


def render(a: Run, b: Run, diffs: list[StudyDiff], max_rows: int = 25) -> str:
    from dlmlab.report.html import fmt_duration

    if a.kind == "train":
        lines = [f"A: {a.path}  (training run)", f"B: {b.path}  (training run)"]
    else:
        lines = [f"A: {a.path}  ({a.kind}, preset {a.preset})", f"B: {b.path}  ({b.kind}, preset {b.preset})"]
    tot = {"flipped": 0, "verdicts": 0, "numeric": 0, "missing": 0}
    for d in diffs:
        lines.append("")
        if d.only_in:
            other = "B" if d.only_in == "A" else "A"
            run = b if other == "B" else a
            why = run.status.get(d.name)
            if d.only_in == "neither":
                lines.append(f"== {d.name} ==  no results in either run "
                             f"(A: {a.status.get(d.name, 'absent')}, B: {b.status.get(d.name, 'absent')})")
            else:
                lines.append(f"== {d.name} ==  MISSING in {other}" + (f" (status there: {why})" if why else ""))
            tot["missing"] += 1
            continue
        if a.kind == "train":  # training runs have no wall time, preset or claims
            lines.append(f"== {d.name} ==")
        else:
            head = f"== {d.name} ==  wall time {fmt_duration(d.walls[0])} -> {fmt_duration(d.walls[1])}"
            if d.presets[0] != d.presets[1]:
                head += f"  PRESET {d.presets[0]} -> {d.presets[1]}"
            lines.append(head)
            lines.append(f"claims: {len(d.flipped)} flipped, {len(d.reverdicted)} verdicts changed, "
                         f"{d.same_claims} unchanged"
                         + (f", only in A: {', '.join(d.claims_only['A'])}" if d.claims_only["A"] else "")
                         + (f", only in B: {', '.join(d.claims_only['B'])}" if d.claims_only["B"] else ""))
        for ca, cb in d.flipped:
            lines.append(f"  FLIPPED {ca['id']}: {_holds(ca.get('holds'))} -> {_holds(cb.get('holds'))} "
                         f"(verdict {_verdict(ca)} -> {_verdict(cb)})")
            lines += _claim_lines(ca, cb)
        for ca, cb in d.reverdicted:
            lines.append(f"  VERDICT {ca['id']}: {_verdict(ca)} -> {_verdict(cb)} "
                         f"(still {_holds(ca.get('holds'))})")
            lines += _claim_lines(ca, cb)
        lines.append(f"results: {len(d.numeric)} numeric values differ, {len(d.changed)} other values changed "
                     f"(of {d.n_compared} compared)")
        if d.numeric:
            rows = [("value", "A", "B", "B - A", "change")]
            for k, va, vb in d.numeric[:max_rows]:
                change = f"{(vb - va) / abs(va):+.1%}" if va else "n/a"
                rows.append((k, _v(va), _v(vb), _v(vb - va), change))
            w = [min(max(len(r[i]) for r in rows), 70) for i in range(5)]
            for r in rows:
                cells = "  ".join(c.rjust(wi) for c, wi in zip(r[1:], w[1:]))
                lines.append("  " + r[0][:70].ljust(w[0]) + "  " + cells)
            if len(d.numeric) > max_rows:
                lines.append(f"  ... {len(d.numeric) - max_rows} more (use --max-rows)")
        for k, va, vb in d.changed[:max_rows]:
            lines.append(f"  changed {k}: {_v(va)} -> {_v(vb)}")
        for side in ("A", "B"):
            ks = d.keys_only[side]
            if ks:
                more = " ..." if len(ks) > 8 else ""
                lines.append(f"  {len(ks)} values only in {side}: " + ", ".join(ks[:8]) + more)
        tot["flipped"] += len(d.flipped)
        tot["verdicts"] += len(d.reverdicted)
        tot["numeric"] += len(d.numeric)
    if a.kind == "train":
        d = diffs[0]
        lines += ["", f"summary: {len(d.numeric)} numeric values differ, {len(d.changed)} other values changed"]
    else:
        lines += ["", f"summary: {tot['flipped']} claims flipped, {tot['verdicts']} claim verdicts changed, "
                  f"{tot['numeric']} numeric results differ, {tot['missing']} studies missing on one side"]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir_a", metavar="DIR_A",
                   help="a run directory (one study, `reproduce all` output, or a `dlmlab train` run)")
    p.add_argument("dir_b", metavar="DIR_B", help="the run directory to compare it with")
    p.add_argument("--rtol", type=float, default=1e-9,
                   help="numbers whose relative difference is at most this count as equal (default 1e-9)")
    p.add_argument("--max-rows", type=int, default=25, help="numeric differences listed per study (default 25)")
    p.add_argument("--exit-code", action="store_true", help="exit 1 when the runs differ (like git diff)")


def run(args: argparse.Namespace) -> int:
    if not args.rtol >= 0 or args.max_rows < 0:  # also refuses --rtol nan
        raise UserError(f"--rtol and --max-rows must be >= 0, got {args.rtol} and {args.max_rows}")
    a, b = load_run(args.dir_a), load_run(args.dir_b)
    if (a.kind == "train") != (b.kind == "train"):
        train, other = (a, b) if a.kind == "train" else (b, a)
        raise UserError(f"{train.path} is a training run but {other.path} is a reproduction run; "
                        "compare two training runs or two reproduction runs")
    if a.kind == "study" and b.kind == "study" and set(a.studies) != set(b.studies):
        raise UserError(f"{a.path} is study {next(iter(a.studies))!r} but {b.path} is {next(iter(b.studies))!r}")
    diffs = compare(a, b, args.rtol)
    try:
        print(render(a, b, diffs, args.max_rows), flush=True)
    except BrokenPipeError:  # `dlmlab compare A B | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1 if args.exit_code and any(d.differs for d in diffs) else 0
