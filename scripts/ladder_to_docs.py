"""Quote a finished scale ladder's tables and figures in its study's docs page (never typed by hand).

    python scripts/ladder_to_docs.py STUDY RUN_DIR --note "how and where it ran"

Reads ``RUN_DIR/report.md`` (written by ``dlmlab reproduce STUDY --preset ladder --out RUN_DIR``), takes its
"## Results" section (the ladder tables) and its figures, copies the figures to
``docs/figures/ladder_<study>_<name>.png`` and writes them between the markers
``<!-- ladder-results:begin -->`` and ``<!-- ladder-results:end -->`` of ``docs/<study>.md``, with the
command, the report's wall-time line and ``--note``.  Run it again after a new ladder run to refresh the section.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- ladder-results:begin -->", "<!-- ladder-results:end -->"
FIGURE = re.compile(r"!\[([^\]]*)\]\(figures/([^)]+)\)")


def section(text: str, title: str) -> str:
    """The body of the markdown section ``## title`` (up to the next ``## `` heading)."""
    m = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    if m is None:
        raise SystemExit(f"report.md has no '## {title}' section")
    return m.group(1).strip()


def quoted(study: str, run_dir: Path, note: str, docs: Path) -> str:
    report = (run_dir / "report.md").read_text()
    wall = next((ln.strip() for ln in report.splitlines() if ln.startswith("Preset:")), "")
    figures = []
    for caption, name in FIGURE.findall(section(report, "Figures")):
        target = f"ladder_{study}_{Path(name).name}"
        (docs / "figures").mkdir(exist_ok=True)
        shutil.copyfile(run_dir / "figures" / name, docs / "figures" / target)
        figures.append(f"![{caption}](figures/{target})")
    lines = [BEGIN, "",
             f"Quoted from `report.md` of `dlmlab reproduce {study} --preset ladder --out DIR` by "
             f"`python scripts/ladder_to_docs.py {study} DIR` ({wall}). {note}".rstrip(), "",
             section(report, "Results"), "", *[f + "\n" for f in figures], END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--note", default="")
    p.add_argument("--docs", type=Path, default=ROOT / "docs", help="the docs folder (default: the repository's)")
    a = p.parse_args(argv)
    doc = a.docs / f"{a.study}.md"
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        print(f"{doc} has no {BEGIN} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    doc.write_text(head + quoted(a.study, a.run_dir, a.note, a.docs) + tail)
    print(f"wrote the ladder results of {a.run_dir} into {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
