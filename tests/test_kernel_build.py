"""Building the fused kernels: one build per machine and source version (not per checkout), announced in one
line on stderr, and a `make` target that builds them ahead (issue 37)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from dlmlab.models import fused_scan

CSRC = Path(fused_scan.__file__).with_name("csrc")


def _clone(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name / "csrc"
    shutil.copytree(CSRC, dest)
    return dest / "selective_scan.cpp"


def test_build_folder_is_keyed_by_content_not_by_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a, b = _clone(tmp_path, "checkout_a"), _clone(tmp_path, "checkout_b")
    assert fused_scan.build_dir(a) == fused_scan.build_dir(b) == fused_scan.build_dir(fused_scan.SOURCE)
    b.write_text(b.read_text() + "\n// another source version\n")
    assert fused_scan.build_dir(b) != fused_scan.build_dir(a)
    (a.parent / "fast_exp.h").write_text((a.parent / "fast_exp.h").read_text() + "\n")  # a header counts too
    assert fused_scan.build_dir(a) != fused_scan.build_dir(fused_scan.SOURCE)


def test_a_build_says_so_once_and_compiles_a_staged_copy(tmp_path, monkeypatch, capsys):
    """A fake compiler: the first load announces the build in one line (with a time estimate and `make kernels`);
    the source it compiles lies in the build folder, so two checkouts give the build files the same paths."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls = []

    def fake_load(name, sources, build_directory, **kw):
        calls.append(sources)
        (Path(build_directory) / f"{name}.so").write_bytes(b"")

    monkeypatch.setattr(cpp_extension, "load", fake_load)
    for checkout in ("checkout_a", "checkout_b"):
        fused_scan.build_ops("dlmlab_fused_scan", _clone(tmp_path, checkout), "fused_scan", "fused selective scan",
                             "the PyTorch scan")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dlmlab: compiling the fused selective scan C++ kernel, once per "
                                               "machine and source version (about ")
    assert "make kernels" in err[0] and str(tmp_path / "cache") in err[0]
    out = fused_scan.build_dir(fused_scan.SOURCE)
    assert calls[0] == calls[1] == [str(out / "src" / "selective_scan.cpp")]
    assert (out / "src" / "fast_exp.h").read_text() == (CSRC / "fast_exp.h").read_text()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_setup_builds_the_kernels_ahead():
    root = Path(__file__).resolve().parents[1]
    plan = subprocess.run(["make", "-n", "-W", ".venv/bin/.installed", "setup"], cwd=root, capture_output=True,
                          text=True, check=True).stdout
    assert "-m dlmlab.models.kernels" in plan
    from dlmlab.models import kernels

    assert callable(kernels.build_all)
