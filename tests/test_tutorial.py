"""docs/tutorial.md runs start to finish: its ```bash blocks (in a shell, `dlmlab` from this environment) and
its ```python blocks (one namespace, like a notebook), in order, in a fresh folder holding `configs/` and an
empty `runs/`.  A block after an ``<!-- needs: lm-eval -->`` line runs in its own test, skipped (with the
reason) when the lm-eval backend (``dlmlab lm-eval`` and the ``lm_eval`` package) is not installed."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "docs" / "tutorial.md"
_BLOCK = re.compile(r"^(?:<!-- needs: ([\w-]+) -->\n)?```(bash|python)\n(.*?)^```", re.S | re.M)


# the tutorial trains two 150-step models (90 s on the loaded 2-core machine, 40 s more for its lm-eval
# blocks): outside `make test-fast`, run by CI
STUDY = pytest.mark.study


def blocks(text: str) -> list[tuple[str, str, str | None]]:
    """(language, code, what it needs or None) of the fenced bash / python blocks, in order."""
    return [(m.group(2), m.group(3), m.group(1)) for m in _BLOCK.finditer(text)]


def test_blocks_are_found():
    text = "a\n```bash\nls\n```\n```python\nx = 1\n```\n<!-- needs: lm-eval -->\n```bash\nq\n```\n```text\nno\n```\n"
    assert blocks(text) == [("bash", "ls\n", None), ("python", "x = 1\n", None), ("bash", "q\n", "lm-eval")]


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    data = REPO.parent / "shared" / "data"
    if "DLMLAB_DATA" not in env and data.is_dir():
        env["DLMLAB_DATA"] = str(data)
    return env


def _run(lang: str, code: str, folder: Path, ns: dict, i: int) -> None:
    if lang == "bash":
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=folder, env=_env(),
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (f"tutorial block {i} failed:\n{code}\n--- stdout\n{proc.stdout}\n"
                                      f"--- stderr\n{proc.stderr}")
    else:
        exec(compile(code, f"docs/tutorial.md[block {i}]", "exec"), ns)  # noqa: S102 - our own docs


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    """Run every block that needs nothing extra; returns (folder, namespace, the blocks)."""
    folder = tmp_path_factory.mktemp("tutorial")
    (folder / "configs").symlink_to(REPO / "configs")
    (folder / "runs").mkdir()
    found = blocks(TUTORIAL.read_text(encoding="utf-8"))
    needs = [i for i, (_, _, need) in enumerate(found) if need]
    assert not needs or needs[0] > max(i for i, (_, _, need) in enumerate(found) if not need), \
        "blocks that need extras must come last (they run in their own test)"
    ns: dict = {"__name__": "tutorial"}
    old = Path.cwd()
    os.chdir(folder)
    try:
        for i, (lang, code, need) in enumerate(found):
            if need is None:
                _run(lang, code, folder, ns, i)
    finally:
        os.chdir(old)
    return folder, ns, found


@STUDY
def test_tutorial_runs(tutorial):
    folder, ns, found = tutorial
    assert {lang for lang, _, _ in found} == {"bash", "python"}
    for name in ("runs/mdlm/checkpoints", "runs/ar/checkpoints", "runs/trajectory.html", "runs/mdlm.jsonl"):
        assert (folder / name).exists(), name
    assert ns["report"].points[0] == "blocks.0.resid_pre"     # the last python block ran


@STUDY
def test_tutorial_zoo_section_shows_the_circuit_it_describes(tutorial):
    """Section 0 says the zoo's induction DLM has layer-0 previous- and next-token heads scoring near 1, a layer-1
    induction head (above the induction study's fixed threshold, 0.3) and fills the masked half far above chance."""
    from dlmlab.studies.induction.claims import INDUCTION_THRESHOLD

    _, ns, _ = tutorial
    heads = ns["zoo_heads"]
    assert heads["previous-token"][2] > 0.9 and heads["next-token"][2] > 0.9, heads
    assert heads["induction"][2] > INDUCTION_THRESHOLD, heads
    assert ns["zoo_acc"] > 10 / ns["dlm"].tokenizer.vocab_size, ns["zoo_acc"]


@STUDY
def test_tutorial_says_what_its_tiny_models_show(tutorial):
    """Section 4 says the tiny models show no induction head: the AR model copies at most a little above chance
    and no layer-1 head attends to the earlier copy's next token at 5x the uniform level.  If a config change
    makes a head appear, this fails and the paragraph must be rewritten."""
    _, ns, _ = tutorial
    uniform = 1 / ns["repeated"].shape[1]
    assert ns["ar_acc"] < 5 / ns["V"], ns["ar_acc"]
    assert float(ns["induction"][1].max()) < 5 * uniform, ns["induction"]


def _lm_eval_missing() -> str | None:
    from dlmlab.cli.main import build_parser

    if importlib.util.find_spec("lm_eval") is None:
        return "the lm_eval package (lm-evaluation-harness) is not installed"
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    if "lm-eval" not in sub.choices:
        return "`dlmlab lm-eval` is not available in this build (dlmlab.lmeval / cli.lm_eval_cmd missing)"
    return None


@STUDY
def test_tutorial_lm_eval_blocks(tutorial):
    folder, ns, found = tutorial
    extra = [(i, lang, code) for i, (lang, code, need) in enumerate(found) if need == "lm-eval"]
    assert extra, "the tutorial's lm-eval section is marked <!-- needs: lm-eval -->"
    missing = _lm_eval_missing()
    if missing:
        pytest.skip(f"tutorial section 8 not run: {missing}")
    for i, lang, code in extra:
        _run(lang, code, folder, ns, i)
