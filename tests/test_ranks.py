"""The rank helpers live in a base module (dlmlab.ranks): report/ uses them without importing training/."""


import dlmlab.ranks
import dlmlab.training
import dlmlab.training.distributed


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
