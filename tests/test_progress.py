"""Progress output: tqdm bars on a terminal, one plain line per finished unit in a redirected log."""

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlmlab.progress import LineBar, bar
from fake_studies import install, make_study

SRC = str(Path(__file__).resolve().parents[1] / "src")


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def lines_of(text: str) -> list[str]:
    assert "\r" not in text and "\x1b" not in text  # no carriage returns, no cursor moves
    return text.splitlines()


def test_a_redirected_bar_writes_a_line_per_unit_and_the_final_count():
    f = io.StringIO()
    b = bar(total=4, desc="jobs", unit="job", file=f, leave=False, position=3, dynamic_ncols=True, log_every_s=0)
    assert isinstance(b, LineBar)
    for _ in range(4):
        b.update(1)  # a burst: tqdm's 0.1 s minimum interval would drop all but the first
    b.close()
    got = [line.split(" [")[0] for line in lines_of(f.getvalue())]
    assert got == ["jobs: 0/4 (0%)", "jobs: 1/4 (25%)", "jobs: 2/4 (50%)", "jobs: 3/4 (75%)", "jobs: 4/4 (100%)"]


def test_the_estimate_is_the_average_time_per_unit_times_the_units_left():
    f = io.StringIO()
    b = bar(total=4, desc="runs", unit="job", file=f, log_every_s=0)
    b.start_t -= 100.0  # the first job took 100 s
    b.update(1)
    b.close()
    assert "runs: 1/4 (25%) [01:40 elapsed, 05:00 left, 100.00s/job]" in lines_of(f.getvalue())


def test_a_throttled_bar_writes_at_most_a_line_per_interval_and_always_the_last(monkeypatch):
    f = io.StringIO()
    now = [0.0]
    monkeypatch.setattr(LineBar, "_clock", staticmethod(lambda: now[0]))
    b = bar(total=100, desc="train", file=f, log_every_s=30, leave=False)
    for i in range(100):
        now[0] = i  # one step a second
        b.update(1)
        b.set_postfix(loss=1.0)  # a new postfix alone writes nothing
    b.close()
    got = [line.split(" (")[0] for line in lines_of(f.getvalue())]
    assert got == ["train: 31/100", "train: 61/100", "train: 91/100", "train: 100/100"]


def test_an_interrupted_bar_still_writes_where_it_stopped():
    f = io.StringIO()
    with bar(range(10), desc="sizes", file=f) as b:
        for i in b:
            if i == 2:
                break
    assert lines_of(f.getvalue())[-1].startswith("sizes: 2/10 (20%)")


def test_a_terminal_keeps_the_tqdm_bar():
    f = FakeTerminal()
    b = bar(total=3, desc="jobs", file=f)
    assert not isinstance(b, LineBar)
    b.update(3)
    b.close()
    assert "\r" in f.getvalue() and "3/3" in f.getvalue()


def test_disabled_bars_write_nothing():
    f = io.StringIO()
    with bar(total=3, file=f, disable=True, log_every_s=0) as b:
        b.update(3)
    assert f.getvalue() == ""


def test_run_all_redirected_shows_every_study_line(tmp_path, monkeypatch, capsys):
    from dlmlab.studies.all import run_all

    install(monkeypatch, {"a": make_study("a"), "b": make_study("b"), "c": make_study("c")})
    run_all("smoke", tmp_path / "x", progress=True)
    cap = capsys.readouterr()  # pytest's capture is no terminal, like `> log 2>&1`
    got = [line.split(" [")[0] for line in lines_of(cap.err) if line.startswith("all (smoke)")]
    assert got == ["all (smoke): 0/3 (0%)", "all (smoke): 1/3 (33%)", "all (smoke): 2/3 (67%)",
                   "all (smoke): 3/3 (100%)"]
    assert "[a] done" in cap.out and "[c] done" in cap.out

    install(monkeypatch, {"a": make_study("a"), "b": make_study("b"), "c": make_study("c"), "d": make_study("d")})
    run_all("smoke", tmp_path / "x", progress=True)  # a, b, c are reused: they count as done from the start
    got = [line.split(" [")[0] for line in lines_of(capsys.readouterr().err) if line.startswith("all (smoke)")]
    assert got == ["all (smoke): 3/4 (75%)", "all (smoke): 4/4 (100%)"]


SCRIPT = """
import time
from dlmlab.progress import bar
from dlmlab.studies.parallel import map_jobs

if __name__ == "__main__":
    with bar(total=3, desc="outer", unit="cell", log_every_s=0) as b:
        for _ in range(3):
            b.update(1)
    print("between the bars", flush=True)
    map_jobs(time.sleep, [(0.5,)] + [(0.01,)] * 5, workers=WORKERS, desc="sleeps")
"""


def _redirected(tmp_path: Path, workers: int, nohup: bool = False) -> list[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("WORKERS", str(workers)))
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    cmd = (["nohup"] if nohup else []) + [sys.executable, str(script)]
    with open(log, "w") as f:  # `> log 2>&1`
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, check=True,
                       timeout=120)
    return lines_of(log.read_text())


def _counts(lines: list[str], desc: str) -> list[str]:
    return [line.split(" (")[0] for line in lines if line.startswith(desc + ":")]


def test_a_redirected_run_logs_every_job_in_one_process(tmp_path):
    lines = _redirected(tmp_path, workers=1)
    assert _counts(lines, "outer") == [f"outer: {i}/3" for i in range(4)]
    assert lines.index("between the bars") == 4
    assert _counts(lines, "sleeps") == [f"sleeps: {i}/6" for i in range(7)]


@pytest.mark.study  # worker processes
@pytest.mark.skipif(not Path("/usr/bin/nohup").exists(), reason="no nohup")
def test_a_redirected_run_logs_every_job_as_the_workers_finish_it(tmp_path):
    lines = _redirected(tmp_path, workers=2, nohup=True)
    # before the fix the job bar showed 1/6 once, after all six had ended, with the first job's rate as estimate
    assert _counts(lines, "sleeps") == [f"sleeps: {i}/6" for i in range(7)]
