"""`dlmlab compare DIR_A DIR_B` on single-study and `all` run directories."""

from __future__ import annotations

import pytest

from dlmlab.cli.compare_cmd import compare, flatten, load_run
from dlmlab.cli.main import main
from dlmlab.report import write_study
from dlmlab.studies.all import StudiesFailed, run_all
from fake_studies import install, make_result, make_study


def _study_dir(path, name="a", holds=(True, False), scale=1.0, preset="smoke"):
    write_study(path, make_result(name, preset, path, holds=holds, scale=scale, figures=0), name)
    return path


def test_identical_runs_have_no_differences(tmp_path, capsys):
    a, b = _study_dir(tmp_path / "a"), _study_dir(tmp_path / "b")
    assert main(["compare", str(a), str(b), "--exit-code"]) == 0
    out = capsys.readouterr().out
    assert "0 flipped, 0 verdicts changed, 2 unchanged" in out and "0 numeric values differ" in out
    assert "summary: 0 claims flipped, 0 claim verdicts changed, 0 numeric results differ, 0 studies missing" in out


def test_flipped_claims_and_numeric_differences(tmp_path, capsys):
    a = _study_dir(tmp_path / "a", holds=(True, False))
    b = _study_dir(tmp_path / "b", holds=(False, False), scale=2.0)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "FLIPPED a_claim_0: holds -> does not hold (verdict reproduced -> inconclusive (unjudged))" in out
    assert "gap: 0.1 -> 0.2" in out
    assert "1 flipped, 0 verdicts changed, 1 unchanged" in out
    # results.loss 1 -> 2, acc.mdlm .25 -> .5, table cells loss(ar) 1.25 -> 2.5, acc(mdlm) .25 -> .5
    assert "4 numeric values differ" in out
    assert "loss" in out and "acc.mdlm" in out and "table[a main table][ar][loss]" in out
    assert "+100.0%" in out
    assert main(["compare", str(a), str(b), "--exit-code"]) == 1
    capsys.readouterr()


def test_verdict_and_reason_changes_are_reported(tmp_path, capsys):
    """A verdict or its reason that changes while ``holds`` does not (both False) is reported, not "unchanged"."""
    from dlmlab.report.claims import REPRODUCED, contradicted, not_run, underpowered

    a = _study_dir(tmp_path / "a", holds=(underpowered("rope - learned [-0.1, 0.2] spans 0"), REPRODUCED,
                                          not_run("no ARM")))
    b = _study_dir(tmp_path / "b", holds=(contradicted("rope - learned [-0.53, -0.38] below 0"), REPRODUCED,
                                          not_run("no ARM")))
    assert main(["compare", str(a), str(b), "--exit-code"]) == 1  # a verdict change is a difference
    out = capsys.readouterr().out
    assert "VERDICT a_claim_0: inconclusive (underpowered) -> contradicted (still does not hold)" in out
    assert "detail: rope - learned [-0.1, 0.2] spans 0 -> rope - learned [-0.53, -0.38] below 0" in out
    assert "claims: 0 flipped, 1 verdicts changed, 2 unchanged" in out
    assert "summary: 0 claims flipped, 1 claim verdicts changed" in out
    assert "FLIPPED" not in out and "a_claim_1" not in out and "a_claim_2" not in out
    # the reason alone changing (underpowered -> precondition) is a change too
    from dlmlab.report.claims import precondition_failed

    c = _study_dir(tmp_path / "c", holds=(precondition_failed("at chance"), REPRODUCED, not_run("no ARM")))
    d = compare(load_run(a), load_run(c))[0]
    assert [x[0]["id"] for x in d.reverdicted] == ["a_claim_0"] and d.same_claims == 2 and d.differs
    assert main(["compare", str(a), str(c)]) == 0
    assert "VERDICT a_claim_0: inconclusive (underpowered) -> inconclusive (precondition)" in capsys.readouterr().out
    # a flip shows both verdicts
    e = _study_dir(tmp_path / "e", holds=(REPRODUCED, REPRODUCED, not_run("no ARM")))
    assert main(["compare", str(b), str(e)]) == 0
    assert "FLIPPED a_claim_0: does not hold -> holds (verdict contradicted -> reproduced)" in capsys.readouterr().out


def test_results_written_before_verdicts_compare_by_holds(tmp_path, capsys):
    """A results.json without ``verdict`` reads as its ``holds`` implies (False: unjudged)."""
    import json

    from dlmlab.report.claims import contradicted

    old = _study_dir(tmp_path / "old", holds=(True, False))
    path = old / "results.json"
    data = json.loads(path.read_text())
    for c in data["claims"]:
        for k in ("verdict", "reason", "detail"):
            c.pop(k)
    path.write_text(json.dumps(data))
    new = _study_dir(tmp_path / "new", holds=(True, contradicted("below 0")))
    assert main(["compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "VERDICT a_claim_1: inconclusive (unjudged) -> contradicted (still does not hold)" in out
    assert "0 flipped, 1 verdicts changed, 1 unchanged" in out


def test_rtol_hides_small_differences(tmp_path):
    a = load_run(_study_dir(tmp_path / "a"))
    b = load_run(_study_dir(tmp_path / "b", scale=1.0 + 1e-6))
    assert compare(a, b, rtol=1e-9)[0].numeric
    assert not compare(a, b, rtol=1e-3)[0].numeric


def test_all_dirs_missing_study_and_single_vs_all(tmp_path, monkeypatch, capsys):
    install(monkeypatch, {"x": make_study("x"), "y": make_study("y")})
    run_all("smoke", tmp_path / "A", progress=False)
    install(monkeypatch, {"x": make_study("x", holds=(False, False)), "y": None})
    with pytest.raises(StudiesFailed):
        run_all("smoke", tmp_path / "B", progress=False)
    assert main(["compare", str(tmp_path / "A"), str(tmp_path / "B")]) == 0
    out = capsys.readouterr().out
    assert "(all, preset smoke)" in out
    assert "== y ==  MISSING in B (status there: missing)" in out
    assert "FLIPPED x_claim_0" in out
    assert "1 claims flipped" in out and "1 studies missing on one side" in out

    # one study's folder against the `all` run that contains it
    assert main(["compare", str(tmp_path / "A" / "x"), str(tmp_path / "B")]) == 0
    out = capsys.readouterr().out
    assert "== x ==" in out and "== y ==" not in out and "FLIPPED x_claim_0" in out


def test_bad_inputs_are_clear_errors(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    a = _study_dir(tmp_path / "a")
    assert main(["compare", str(a), str(tmp_path / "empty")]) == 2
    assert "no results.json in" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    other = _study_dir(tmp_path / "o", name="other")
    assert main(["compare", str(a), str(other)]) == 2
    assert "is study 'a' but" in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text("{not json")
    assert main(["compare", str(a), str(tmp_path / "broken")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_flatten_keys():
    res = {"results": {"a": {"b": 1.5, "c": [1, 2]}, "s": "x"},
           "tables": [{"title": "T", "columns": ["m", "v"], "rows": [["ar", 0.5]]},
                      {"title": "U", "columns": ["k", "v"], "rows": [[3, 4]]}]}
    assert flatten(res) == {"a.b": 1.5, "a.c[0]": 1, "a.c[1]": 2, "s": "x", "table[T][ar][v]": 0.5,
                            "table[U][0][k]": 3, "table[U][0][v]": 4}
