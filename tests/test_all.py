"""`dlmlab reproduce all`: runs every study, reuses finished ones, records crashes and missing studies."""

from __future__ import annotations

import json
import os

import pytest

from dlmlab.cli.main import main
from dlmlab.studies.all import MANIFEST, StudiesFailed, run_all, summary_table
from fake_studies import install, make_study


def test_runs_every_study_and_reuses_finished_ones(tmp_path, monkeypatch, capsys):
    calls = []
    install(monkeypatch, {n: make_study(n, calls) for n in ["a", "b", "c"]})
    report = run_all("smoke", tmp_path, progress=False)
    assert report == tmp_path / "report.html" and report.exists()
    assert calls == [("a", "smoke"), ("b", "smoke"), ("c", "smoke")]
    html = report.read_text()
    for n in "abc":  # each study's own results, written where run_all says, and named in the report
        res = json.loads((tmp_path / n / "results.json").read_text())
        assert (res["study"], res["preset"]) == (n, "smoke")
        assert [(c["id"], c["holds"]) for c in res["claims"]] == [(f"{n}_claim_0", True), (f"{n}_claim_1", False)]
        assert f"Fake study {n}" in html
    man = json.loads((tmp_path / MANIFEST).read_text())
    assert man["preset"] == "smoke"
    assert [s["status"] for s in man["studies"].values()] == ["ran"] * 3
    assert all(s["wall_time_s"] > 0 for s in man["studies"].values())
    assert man["studies"]["a"]["claims_hold"] == 1 and man["studies"]["a"]["claims_total"] == 2
    assert man["studies"]["a"]["claims_verdicts"] == {"reproduced": 1, "contradicted": 0, "inconclusive": 1,
                                                      "unjudged": 1}
    from importlib import metadata

    env = man["environment"]
    assert (env["torch"], env["cpu_count"]) == (metadata.version("torch"), os.cpu_count())
    table = capsys.readouterr().out
    assert "claims" in table and "2: 1 reproduced, 0 contradicted, 1 inconclusive (1 unjudged)" in table
    assert "6: 3 reproduced, 0 contradicted, 3 inconclusive (3 unjudged)" in table.splitlines()[-1]  # total row
    assert "ran" in table

    walls = {n: s["wall_time_s"] for n, s in man["studies"].items()}
    calls.clear()
    run_all("smoke", tmp_path, progress=False)
    assert calls == []  # nothing recomputed
    man2 = json.loads((tmp_path / MANIFEST).read_text())
    assert [s["status"] for s in man2["studies"].values()] == ["reused"] * 3
    assert {n: s["wall_time_s"] for n, s in man2["studies"].items()} == walls  # measured time kept


def test_killed_run_continues_where_it_stopped(tmp_path, monkeypatch):
    calls = []
    install(monkeypatch, {"a": make_study("a", calls), "b": make_study("b", calls, crash=KeyboardInterrupt()),
                          "c": make_study("c", calls)})
    with pytest.raises(KeyboardInterrupt):
        run_all("cpu", tmp_path, progress=False)
    man = json.loads((tmp_path / MANIFEST).read_text())
    assert {n: s["status"] for n, s in man["studies"].items()} == {"a": "ran", "b": "interrupted", "c": "interrupted"}
    assert "Fake study a" in (tmp_path / "report.html").read_text()  # the report of what finished is written
    assert not (tmp_path / "b" / "results.json").exists() and not (tmp_path / "c" / "results.json").exists()

    calls.clear()
    install(monkeypatch, {n: make_study(n, calls) for n in ["a", "b", "c"]})
    run_all("cpu", tmp_path, progress=False)
    assert calls == [("b", "cpu"), ("c", "cpu")]


def test_crash_is_recorded_and_others_still_run(tmp_path, monkeypatch):
    calls = []
    install(monkeypatch, {"a": make_study("a", calls, crash=RuntimeError("boom in a")), "b": make_study("b", calls)})
    with pytest.raises(StudiesFailed) as ei:
        run_all("smoke", tmp_path, progress=False)
    assert "a failed" in str(ei.value) and ei.value.report == tmp_path / "report.html"
    assert calls == [("a", "smoke"), ("b", "smoke")]
    man = json.loads((tmp_path / MANIFEST).read_text())
    assert man["studies"]["a"]["status"] == "failed" and "boom in a" in man["studies"]["a"]["error"]
    assert man["studies"]["b"]["status"] == "ran"
    assert "boom in a" in (tmp_path / "a" / "error.txt").read_text()
    assert json.loads((tmp_path / "b" / "results.json").read_text())["study"] == "b"
    html = ei.value.report.read_text()
    assert "boom in a" in html and "RuntimeError" in html

    # the crashed study is retried on the next run; the finished one is not
    calls.clear()
    install(monkeypatch, {"a": make_study("a", calls), "b": make_study("b", calls)})
    run_all("smoke", tmp_path, progress=False)
    assert calls == [("a", "smoke")]
    assert not (tmp_path / "a" / "error.txt").exists()


def test_missing_study_is_reported_not_faked(tmp_path, monkeypatch):
    install(monkeypatch, {"a": make_study("a"), "gone": None})
    with pytest.raises(StudiesFailed, match="gone missing"):
        run_all("smoke", tmp_path, progress=False)
    man = json.loads((tmp_path / MANIFEST).read_text())
    assert man["studies"]["gone"]["status"] == "missing"
    assert man["studies"]["gone"]["claims_total"] is None
    assert not (tmp_path / "gone").exists()
    assert "Not installed" in (tmp_path / "report.html").read_text()


def test_package_without_run_is_missing(tmp_path, monkeypatch):
    import types

    install(monkeypatch, {"a": make_study("a"), "half": types.ModuleType("half")})
    with pytest.raises(StudiesFailed, match="half missing"):
        run_all("smoke", tmp_path, progress=False)
    man = json.loads((tmp_path / MANIFEST).read_text())
    assert "incomplete study package" in man["studies"]["half"]["error"]


def test_study_that_writes_nothing_is_a_failure(tmp_path, monkeypatch):
    mod = make_study("a")
    mod.run = lambda preset, out, progress=True: None
    install(monkeypatch, {"a": mod})
    with pytest.raises(StudiesFailed):
        run_all("smoke", tmp_path, progress=False)
    man = json.loads((tmp_path / MANIFEST).read_text())
    assert "without writing" in man["studies"]["a"]["error"]


def test_other_preset_in_out_dir_is_refused(tmp_path, monkeypatch):
    calls = []
    install(monkeypatch, {"a": make_study("a", calls)})
    run_all("smoke", tmp_path, progress=False)
    with pytest.raises(ValueError, match="preset smoke"):
        run_all("cpu", tmp_path, progress=False)
    (tmp_path / MANIFEST).unlink()  # even without the manifest, results.json says which preset made it
    with pytest.raises(ValueError, match="'smoke'"):
        run_all("cpu", tmp_path, progress=False)
    assert calls == [("a", "smoke")]


def test_cli_prints_report_path_and_exit_codes(tmp_path, monkeypatch, capsys):
    install(monkeypatch, {"a": make_study("a"), "b": make_study("b")})
    rc = main(["reproduce", "all", "--preset", "smoke", "--out", str(tmp_path / "ok"), "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and out.strip().splitlines()[-1] == f"report: {tmp_path / 'ok' / 'report.html'}"

    install(monkeypatch, {"a": make_study("a", crash=ValueError("bad")), "b": make_study("b")})
    rc = main(["reproduce", "all", "--preset", "smoke", "--out", str(tmp_path / "bad"), "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 1
    assert f"report: {tmp_path / 'bad' / 'report.html'}" in cap.out
    assert "a failed" in cap.err

    rc = main(["reproduce", "all", "--preset", "cpu", "--out", str(tmp_path / "ok"), "--no-progress"])
    assert rc == 2 and "preset" in capsys.readouterr().err


def test_progress_bar_over_studies(tmp_path, monkeypatch, capsys):
    install(monkeypatch, {"a": make_study("a"), "b": make_study("b")})
    run_all("smoke", tmp_path, progress=True)
    cap = capsys.readouterr()
    assert "all (smoke)" in cap.err and "2/2" in cap.err
    assert "[a] done" in cap.out + cap.err


def test_summary_table_formats():
    from dlmlab.studies.all import StudyRun

    counts = {"reproduced": 2, "contradicted": 1, "inconclusive": 2, "underpowered": 1, "precondition": 1}
    t = summary_table([StudyRun("x", status="ran", wall_time_s=125.0, claims_hold=2, claims_total=5,
                                claims_verdicts=counts),
                       StudyRun("y", status="missing"),
                       StudyRun("z", status="reused", claims_hold=1, claims_total=3)])  # an older manifest's row
    lines = t.splitlines()
    assert lines[0].split() == ["study", "status", "wall", "time", "claims"]
    assert "2m 05s" in t and "missing" in t and lines[-1].startswith("total")
    assert "5: 2 reproduced, 1 contradicted, 2 inconclusive (1 underpowered, 1 precondition)" in lines[2]
    assert "1 / 3 hold" in t
    assert lines[-1].endswith("5: 2 reproduced, 1 contradicted, 2 inconclusive (1 underpowered, 1 precondition)")


def test_finished_results_are_reused_even_if_the_module_is_gone(tmp_path, monkeypatch):
    install(monkeypatch, {"a": make_study("a"), "b": make_study("b")})
    run_all("smoke", tmp_path, progress=False)
    install(monkeypatch, {"a": make_study("a"), "b": None})
    run_all("smoke", tmp_path, progress=False)  # no StudiesFailed: b's finished results still stand
    man = json.loads((tmp_path / MANIFEST).read_text())
    assert man["studies"]["b"]["status"] == "reused" and man["studies"]["b"]["title"] == "Fake study b"


def test_manifest_marks_the_running_study(tmp_path, monkeypatch):
    seen = {}

    def spy(preset, out, progress=True):
        seen.update(json.loads((tmp_path / MANIFEST).read_text())["studies"])
        return make_study("a").run(preset, out, progress)

    mod = make_study("a")
    mod.run = spy
    install(monkeypatch, {"a": mod, "b": make_study("b")})
    run_all("smoke", tmp_path, progress=False)
    assert seen["a"]["status"] == "running" and seen["b"]["status"] == "pending"


def test_only_rank_zero_writes_the_manifest_and_report(tmp_path, monkeypatch, capsys):
    calls = []
    install(monkeypatch, {"a": make_study("a", calls)})
    monkeypatch.setenv("RANK", "1")
    run_all("smoke", tmp_path, progress=True)
    assert calls == [("a", "smoke")]  # every rank runs the study (its training is data-parallel)
    assert not (tmp_path / MANIFEST).exists() and not (tmp_path / "report.html").exists()
    assert capsys.readouterr().out == ""


def test_cli_single_study_prints_its_verdict_counts(tmp_path, monkeypatch, capsys):
    from dlmlab.report.claims import REPRODUCED, contradicted, underpowered

    install(monkeypatch, {"a": make_study("a", holds=(REPRODUCED, contradicted("x"), underpowered("y"), True))})
    assert main(["reproduce", "a", "--preset", "smoke", "--out", str(tmp_path), "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3] == "claims: 4: 2 reproduced, 1 contradicted, 1 inconclusive (1 underpowered)"
    assert lines[-1] == f"report: {tmp_path / 'report.md'}"
    md = (tmp_path / "report.md").read_text()
    assert "2 reproduced, 1 contradicted, 1 inconclusive (1 underpowered)." in md and "inconclusive (underpowered): y" in md
