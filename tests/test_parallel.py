"""Worker processes for a study's independent jobs: same results as one process, errors surface."""

import json

import pytest

from dlmlab.studies import load_study
from dlmlab.studies.parallel import ENV_WORKERS, default_workers, map_jobs


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


def _smoke_on_1_and_2_workers(name: str, tmp_path, monkeypatch) -> dict:
    """{"1": results.json, "2": results.json} of the study's smoke preset run on 1 and on 2 workers."""
    out = {}
    for workers in ("1", "2"):
        monkeypatch.setenv(ENV_WORKERS, workers)
        load_study(name).run("smoke", tmp_path / workers, progress=False)
        out[workers] = json.loads((tmp_path / workers / "results.json").read_text())
    return out


def test_induction_study_gives_the_same_results_on_two_workers(tmp_path, monkeypatch):
    out = _smoke_on_1_and_2_workers("induction", tmp_path, monkeypatch)
    one, two = out["1"]["results"]["models"], out["2"]["results"]["models"]
    assert set(one) == set(two)
    for key, m in one.items():
        for run in (m, two[key]):
            del run["train"]["seconds"]  # wall time differs; every measurement must not
        assert two[key] == m, key
    assert [c["holds"] for c in out["2"]["claims"]] == [c["holds"] for c in out["1"]["claims"]]


def test_prediff_adaptations_on_two_workers_match_one(tmp_path, monkeypatch):
    """The adapted models travel to the workers and back through their checkpoints unchanged."""
    out = {k: r["results"] for k, r in _smoke_on_1_and_2_workers("prediff", tmp_path, monkeypatch).items()}
    for name, m in out["1"]["methods"].items():
        m2 = out["2"]["methods"][name]
        assert (m2["val_nll"], m2["curve"]) == (m["val_nll"], m["curve"]), name
    strip = lambda s: {k: {m: v for m, v in d.items() if m != "mauve"} for k, d in s.items()}  # noqa: E731
    assert strip(out["2"]["samples"]) == strip(out["1"]["samples"])
