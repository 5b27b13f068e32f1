"""Worker processes for a study's independent jobs: same results as one process, errors surface."""

import json

import pytest
import torch

from dlmlab.studies import load_study
from dlmlab.studies.parallel import ENV_WORKERS, default_workers, map_jobs

pytestmark = pytest.mark.study  # worker processes and smoke studies: outside `make test-fast`


def _square_plus(x: int, y: int) -> int:
    import torch

    assert torch.get_num_threads() == 1
    return x * x + y


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"job {x} failed on purpose")
    return x


def test_map_jobs_keeps_the_order_of_the_jobs_on_two_workers():
    jobs = [(i, 10 * i) for i in range(7)]
    assert map_jobs(_square_plus, jobs, workers=2, progress=False) == [i * i + 10 * i for i in range(7)]
    assert map_jobs(_square_plus, jobs, workers=1, progress=False) == [i * i + 10 * i for i in range(7)]


def test_a_failing_job_raises_its_own_error():
    with pytest.raises(ValueError, match="job 3 failed on purpose"):
        map_jobs(_fail_on_three, [(i,) for i in range(6)], workers=2, progress=False)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        map_jobs(_fail_on_three, [(1,)], workers=0)


def test_default_workers_reads_the_environment(monkeypatch):
    monkeypatch.setenv(ENV_WORKERS, "3")
    assert default_workers() == 3
    monkeypatch.setenv(ENV_WORKERS, "many")
    with pytest.raises(ValueError, match=ENV_WORKERS):
        default_workers()
    monkeypatch.setenv(ENV_WORKERS, "0")
    with pytest.raises(ValueError, match=">= 1"):
        default_workers()
    monkeypatch.delenv(ENV_WORKERS)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert default_workers() == 1  # under torchrun the ranks share the work instead
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert default_workers() >= 1
    assert default_workers("cuda:0") == 1  # one GPU: the jobs take turns on it


# wall-clock measurements: the only part of a study's results.json allowed to differ between runs
WALL_CLOCK_KEYS = {"seconds", "wall_time_s", "train_time_s", "analysis_time_s", "speed", "environment",
                   "heads_twoways_cost"}  # the induction study's timing of its extra head scoring
WALL_CLOCK_CLAIMS = {"few_step_sampling_faster_than_ar"}
TIMING_SUFFIXES = ("time_s", "cpu_s", "_seconds")  # measured seconds (wall or CPU), e.g. cpu_time_s, analyse_seconds
WALL_CLOCK_COLUMNS = ("tokens/s", "speed", "seconds", "time")  # and names ending in " s" (e.g. "train s")


def without_wall_clock(x):
    """A results.json (or part of it) without its timing fields: WALL_CLOCK_KEYS and keys ending in TIMING_SUFFIXES
    at any depth, the speed
    claims, and table columns named like WALL_CLOCK_COLUMNS."""
    if isinstance(x, list):
        return [without_wall_clock(v) for v in x if not (isinstance(v, dict) and v.get("id") in WALL_CLOCK_CLAIMS)]
    if not isinstance(x, dict):
        return x
    if {"columns", "rows"} <= set(x):
        wall = lambda c: any(w in c for w in WALL_CLOCK_COLUMNS) or c.endswith(" s")  # noqa: E731
        keep = [i for i, c in enumerate(x["columns"]) if not wall(str(c).lower())]
        x = {**x, "columns": [x["columns"][i] for i in keep], "rows": [[r[i] for i in keep] for r in x["rows"]]}
    return {k: without_wall_clock(v) for k, v in x.items() if k not in WALL_CLOCK_KEYS and not k.endswith(TIMING_SUFFIXES)}


def smoke_results(name: str, out, workers: str, monkeypatch) -> dict:
    """results.json of the study's smoke preset run here on ``workers`` worker processes, wall clock removed."""
    monkeypatch.setenv(ENV_WORKERS, workers)
    load_study(name).run("smoke", out, progress=False)
    return without_wall_clock(json.loads((out / "results.json").read_text()))


def assert_same_results(a: dict, b: dict, where: str = "") -> None:
    """Equal, or an error naming the first differing path."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            assert_same_results(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: lengths {len(a)} != {len(b)}"
        for i, (u, v) in enumerate(zip(a, b)):
            assert_same_results(u, v, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_without_wall_clock_keeps_every_measurement():
    res = {"wall_time_s": 3.0, "results": {"m": {"acc": 0.5, "train": {"seconds": 2.0, "loss": 1.0}}, "speed": {}},
           "tables": [{"title": "t", "columns": ["model", "acc", "tokens/s", "train s"], "rows": [["a", 0.5, 99.0, 3.0]]}],
           "claims": [{"id": "few_step_sampling_faster_than_ar", "holds": True}, {"id": "x", "holds": False}]}
    assert without_wall_clock(res) == {"results": {"m": {"acc": 0.5, "train": {"loss": 1.0}}},
                                       "tables": [{"title": "t", "columns": ["model", "acc"], "rows": [["a", 0.5]]}],
                                       "claims": [{"id": "x", "holds": False}]}


SMOKE_STUDIES = ["induction", "reversal", "state", "prediff"]


@pytest.mark.parametrize("name", SMOKE_STUDIES)
def test_smoke_study_gives_the_same_results_on_one_and_two_workers(name, tmp_path, monkeypatch, study_smoke):
    """Every job seeds itself and trains on the same fixed thread count, so the worker count changes nothing
    but the wall clock (the adapted PreDiff models also travel back through their checkpoints unchanged).
    The one-worker run (caller on one thread) is the session's shared smoke run (tests/conftest.py, issue 34)."""
    one = without_wall_clock(study_smoke(name)[2])
    torch_before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # the caller's thread count of the shared run: only the worker count differs
        two = smoke_results(name, tmp_path / "2", "2", monkeypatch)
    finally:
        torch.set_num_threads(torch_before)
    assert_same_results(one, two, name)


@pytest.mark.parametrize("name", SMOKE_STUDIES)
def test_smoke_study_gives_the_same_results_whatever_the_callers_thread_count(name, tmp_path, monkeypatch,
                                                                              study_smoke):
    """A study trains on dlmlab.studies.threads.STUDY_THREADS, not on the thread count it is called with
    (which is the machine's core count outside the tests).  The one-thread run (one worker) is the session's
    shared smoke run (tests/conftest.py, issue 34); this test runs the study again from a caller on two threads."""
    one = without_wall_clock(study_smoke(name)[2])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert torch.get_num_threads() == 2
        two = smoke_results(name, tmp_path / "2", "1", monkeypatch)
    finally:
        torch.set_num_threads(before)
    assert_same_results(one, two, name)
