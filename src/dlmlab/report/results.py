"""The shared shape of a study run: ``results.json`` + ``report.md`` + ``figures/*.png``.

results.json::

    {"study", "preset", "config", "results", "tables": [{"title", "columns", "rows"}],
     "figures": [{"path", "caption"}], "claims": [Claim...], "environment", "wall_time_s"}

The HTML report of ``dlmlab reproduce all`` and ``dlmlab compare`` read this shape.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlmlab.files import atomic_write_text, strict_json
from dlmlab.ranks import is_main_process
from dlmlab.report.claims import Claim, Judgement, count_verdicts, verdict_summary


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]
    note: str = ""

    def to_dict(self) -> dict:
        return {"title": self.title, "columns": self.columns, "rows": self.rows, "note": self.note}


@dataclass
class StudyResult:
    study: str
    preset: str
    config: dict
    results: dict = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    figures: list[dict] = field(default_factory=list)  # {"path": relative to out dir, "caption"}
    claims: list[Claim] = field(default_factory=list)
    wall_time_s: float = 0.0
    setup: str = ""  # one paragraph: what was trained, on what, how long

    def to_dict(self) -> dict:
        return {
            "study": self.study,
            "preset": self.preset,
            "setup": self.setup,
            "config": self.config,
            "results": self.results,
            "tables": [t.to_dict() for t in self.tables],
            "figures": self.figures,
            "claims": [c.to_dict() for c in self.claims],
            "environment": environment(),
            "wall_time_s": self.wall_time_s,
        }


def environment() -> dict:
    import torch

    env = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        from dlmlab import __version__

        env["dlmlab"] = __version__
    except ImportError:
        pass
    return env


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None, tensors/numpy -> python."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        return _clean(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def markdown_table(t: Table) -> str:
    lines = [f"**{t.title}**", "", "| " + " | ".join(t.columns) + " |", "|" + "---|" * len(t.columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in t.rows]
    if t.note:
        lines += ["", t.note]
    return "\n".join(lines)


def verdict_markdown(j: Judgement) -> str:
    """``**reproduced**``, ``contradicted: detail``, ``inconclusive (underpowered): detail`` (pipes escaped)."""
    text = f"**{j.label()}**" if j.verdict == "reproduced" else j.label()
    if j.detail:
        text += f": {j.detail}"
    return text.replace("|", "\\|")


#: evidence items shown in a claim's row (the rest are in results.json)
EVIDENCE_SHOWN = 6


def claims_markdown(claims: list[Claim]) -> list[str]:
    """The claims table: id, statement, the summary line it tests (with the study's number and any deviation),
    verdict, the first :data:`EVIDENCE_SHOWN` scalar evidence items."""
    from dlmlab.report.seeds import study_effect_text

    lines = ["| claim | statement | summary line it tests | study's effect | verdict | evidence |",
             "|---|---|---|---|---|---|"]
    for c in claims:
        ev = [f"{k}={fmt(v)}" for k, v in c.evidence.items() if not isinstance(v, (dict, list))]
        more = len(c.evidence) - min(len(ev), EVIDENCE_SHOWN)
        evs = "; ".join(ev[:EVIDENCE_SHOWN]) + (f"; ({more} more in results.json)" if more > 0 else "")
        seed = (f"`{c.seed_ref}`: " if c.seed_ref else "") + c.seed_says
        if c.deviation:
            seed += f" (deviation: {c.deviation})"
        cells = [f"`{c.id}`", c.statement, seed or "-", study_effect_text(c.study_effect),
                 verdict_markdown(c.judgement), evs]
        lines.append("| " + " | ".join(x.replace("|", "\\|") if i != 4 else x for i, x in enumerate(cells)) + " |")
    return lines + [""]


def render_markdown(res: StudyResult, title: str) -> str:
    parts = [f"# {title}", "", f"Preset: `{res.preset}` - wall time {res.wall_time_s:.0f} s", ""]
    if res.setup:
        parts += ["## Setup", "", res.setup, ""]
    own = [c for c in res.claims if not c.extension]
    ext = [c for c in res.claims if c.extension]
    parts += ["## Claims", ""]
    if own:
        parts += [verdict_summary(count_verdicts(own)) + ".", ""]
    parts += claims_markdown(own)
    if ext:
        parts += ["## Extensions", "", "Claims that test something no study summary states; not counted above.", "",
                  verdict_summary(count_verdicts(ext, extensions=True)) + ".", ""]
        parts += claims_markdown(ext)
    if res.tables:
        parts += ["## Results", ""]
        for t in res.tables:
            parts += [markdown_table(t), ""]
    if res.figures:
        parts += ["## Figures", ""]
        for f in res.figures:
            parts += [f"![{f['caption']}]({f['path']})", "", f"*{f['caption']}*", ""]
    return "\n".join(parts)


def write_study(out: str | Path, res: StudyResult, title: str) -> Path:
    """Write results.json and report.md into ``out`` atomically; returns results.json's path.

    Under ``torchrun`` only rank 0 writes.
    """
    out = Path(out)
    if not is_main_process():
        return out / "results.json"
    out.mkdir(parents=True, exist_ok=True)
    data = _clean(res.to_dict())
    atomic_write_text(out / "results.json", strict_json(data, indent=1))  # NaN / inf -> null: strict JSON
    atomic_write_text(out / "report.md", render_markdown(res, title))
    return out / "results.json"


def load_results(path: str | Path) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    if not path.exists():
        raise FileNotFoundError(f"no results.json at {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
