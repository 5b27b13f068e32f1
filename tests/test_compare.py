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
    assert "0 flipped, 2 unchanged" in out and "0 numeric values differ" in out
    assert "summary: 0 claims flipped, 0 numeric results differ, 0 studies missing" in out


def test_flipped_claims_and_numeric_differences(tmp_path, capsys):
    a = _study_dir(tmp_path / "a", holds=(True, False))
    b = _study_dir(tmp_path / "b", holds=(False, False), scale=2.0)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "FLIPPED a_claim_0: holds -> does not hold" in out
    assert "gap: 0.1 -> 0.2" in out
    assert "1 flipped, 1 unchanged" in out
    # results.loss 1 -> 2, acc.mdlm .25 -> .5, table cells loss(ar) 1.25 -> 2.5, acc(mdlm) .25 -> .5
    assert "4 numeric values differ" in out
    assert "loss" in out and "acc.mdlm" in out and "table[a main table][ar][loss]" in out
    assert "+100.0%" in out
    assert main(["compare", str(a), str(b), "--exit-code"]) == 1
    capsys.readouterr()


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
