"""The rank helpers live in a base module (dlmlab.ranks): report/ uses them without importing training/."""

import subprocess
import sys

import dlmlab.ranks
import dlmlab.training
import dlmlab.training.distributed


def test_importing_report_does_not_import_training():
    code = ("import sys, dlmlab.report, dlmlab.report.figures, dlmlab.report.html, dlmlab.report.ladder\n"
            "print(sorted(m for m in sys.modules if m == 'dlmlab.training' or m.startswith('dlmlab.training.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_training_re_exports_the_same_helper():
    assert dlmlab.training.distributed.is_main_process is dlmlab.ranks.is_main_process
    assert dlmlab.training.is_main_process is dlmlab.ranks.is_main_process


def test_is_main_process_reads_rank(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert dlmlab.ranks.is_main_process() is True
    monkeypatch.setenv("RANK", "0")
    assert dlmlab.ranks.is_main_process() is True
    monkeypatch.setenv("RANK", "3")
    assert dlmlab.ranks.is_main_process() is False
