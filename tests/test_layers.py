"""The layers of src/dlmlab (issue 35): one ordered list, checked on the import graph by parsing (no import is
run, so it takes milliseconds), and README's Layout section checked against the same list and the disk.

A module may import its own unit (a top-level package or module of dlmlab) and any unit of a lower layer,
never a unit of its own layer or of a higher one; lazy imports inside functions count the same.  The
package root (``dlmlab/__init__.py``: ``dlmlab.load`` and ``__version__``) is a facade: its names are
counted as the units that define them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "dlmlab"

#: lowest first; each entry is one layer, its units may not import one another
LAYERS: list[tuple[str, ...]] = [
    ("errors",),
    ("config", "files", "progress", "outdir", "ranks"),
    ("data",),
    ("interp",),
    ("hooks", "cache", "models", "tasks", "rating"),
    ("objectives",),
    ("rundir",),
    ("training", "sampling", "metrics", "report"),
    ("prediff", "analysis", "lmeval"),
    ("studies", "zoo"),
    ("cli", "config_reference"),
]
#: names of the package root and the unit each comes from
ROOT_NAMES = {"__version__": "errors", "load": "rundir", "Loaded": "rundir"}
#: modules kept only to say where their content went (they import nothing)
TOMBSTONES = {"loading"}


def layer_of() -> dict[str, int]:
    return {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def unit_of(module: str) -> str:
    """``dlmlab.rundir.load`` -> ``rundir``; the package root -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports(path: Path) -> list[tuple[int, str]]:
    """``(line, unit)`` of every dlmlab import in ``path`` (module level or inside functions)."""
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    package = [p for p in package if p != "__init__"]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            mods = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            mods = [(base, a.name) for a in node.names]
        else:
            continue
        for mod, name in mods:
            if mod != "dlmlab" and not mod.startswith("dlmlab."):
                continue
            unit = unit_of(mod)
            if unit == "":  # the package root: the unit its name comes from (`import dlmlab`: dlmlab.load)
                unit = ROOT_NAMES.get(name, name) if name is not None else "rundir"
            out.append((node.lineno, unit))
    return out


def units_on_disk() -> set[str]:
    return {p.stem for p in SRC.iterdir() if (p.suffix == ".py" and p.stem != "__init__")
            or (p.is_dir() and (p / "__init__.py").is_file())}


def test_every_unit_is_in_exactly_one_layer():
    listed = [u for layer in LAYERS for u in layer]
    assert len(listed) == len(set(listed)), "a unit is listed twice"
    assert set(listed) | TOMBSTONES == units_on_disk()


def test_no_import_points_up_or_sideways():
    layer = layer_of()
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        mine = rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.stem != "__init__" else "rundir"
        if mine in TOMBSTONES:
            assert imports(path) == [], f"{rel} only says where its content went; it imports nothing"
            continue
        for line, unit in imports(path):
            if unit != mine and unit not in TOMBSTONES and layer[unit] >= layer[mine]:
                bad.append(f"src/dlmlab/{rel}:{line} imports dlmlab.{unit} (layer {layer[unit]}) from "
                           f"dlmlab.{mine} (layer {layer[mine]})")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_upward_lazy_and_relative_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "dlmlab" / "rundir"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("import os\n\ndef f():\n    from dlmlab.training.lm import RunConfig\n"
                              "    from ..cli import main\n    from . import card\n    import dlmlab\n")
    monkeypatch.setattr(__import__(__name__), "SRC", tmp_path / "dlmlab")
    assert imports(pkg / "x.py") == [(4, "training"), (5, "cli"), (6, "rundir"), (7, "rundir")]


def layout_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## Layout\n.*?^```\n(src/dlmlab/\n.*?)^```", text, re.S | re.M)
    assert m, "README.md has no Layout section with a src/dlmlab/ block"
    return m.group(1)


def test_readme_layout_names_every_unit_in_layer_order():
    """Each unit of src/dlmlab is named once in README's Layout block (``name/`` or ``name.py`` at the start
    of a line), in the order of LAYERS, and it names nothing that is not on disk."""
    block = layout_section()
    named = re.findall(r"^  (\w+)(?:/|\.py)\s", block, re.M)
    assert [u for u in named if u != "__init__"] == [u for layer in LAYERS for u in layer], \
        "README's Layout section must list the units of src/dlmlab as tests/test_layers.py LAYERS orders them"
    unit = None
    for line in block.splitlines()[1:]:  # the files it names exist: `a/b.py` anywhere, `b.py` in its unit
        m = re.match(r"^  (\w+)(/|\.py)", line)
        if m:
            unit = m.group(1) if m.group(2) == "/" else None
        text = line[len(m.group(0)):] if m else line
        for path in re.findall(r"\b(\w+/[\w/]*\w+\.py)\b", text):
            assert (SRC / path).is_file(), f"README's Layout names {path}, which is not in src/dlmlab"
        if unit is not None:
            for name in re.findall(r"(?<![/\w])(\w+\.py)\b", text):
                assert (SRC / unit / name).is_file(), f"README's Layout names {unit}/{name}, which is not on disk"
