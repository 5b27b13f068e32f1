"""Every ```python block of README.md and docs/analysis.md runs (blocks of one file share a namespace,
in order, like a notebook), so the documented API cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "docs/analysis.md"]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks of a Markdown text, in order."""
    return [m.group(1) for m in _BLOCK.finditer(text)]


def test_python_blocks_are_found():
    assert python_blocks("x\n```python\na = 1\n```\n```bash\nls\n```\n") == ["a = 1\n"]


@pytest.mark.parametrize("doc", DOCS)
def test_doc_code_runs(doc, tmp_path, monkeypatch):
    path = REPO / doc
    assert path.exists(), f"{doc} does not exist"
    blocks = python_blocks(path.read_text())
    assert blocks, f"{doc} has no python code blocks"
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    ns: dict = {"__name__": f"doc:{doc}"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{doc}[block {i}]", "exec"), ns)  # noqa: S102 - our own docs
