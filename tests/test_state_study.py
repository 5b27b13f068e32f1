"""The state study end to end at the smoke preset: outputs, figures, claims, parameter counts."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dlmlab.config import ConfigError
from dlmlab.studies import load_study
from dlmlab.studies.state import PRESETS, TITLE
from dlmlab.studies.state.claims import all_claims

CLAIMS = {"prefix_tasks_late_in_recurrent", "prefix_tasks_gradual_in_transformer", "dyck_early_in_transformer",
          "s3_groups_with_parity", "probe_direction_ablation_drops_accuracy", "conv1d_matters_for_prefix_not_dyck",
          "readability_vs_causality_split"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("state_smoke")
    mod = load_study("state")
    res = mod.run("smoke", out, progress=False)
    return out, res


def test_smoke_outputs(smoke):
    out, res = smoke
    data = json.loads((out / "results.json").read_text())
    assert data["study"] == "state" and data["preset"] == "smoke"
    assert {c["id"] for c in data["claims"]} == CLAIMS
    for c in data["claims"]:
        assert c["holds"] in (True, False, None)
        if c["holds"] is None:
            assert "reason" in c["evidence"]
    for f in data["figures"]:
        assert (out / f["path"]).stat().st_size > 1000
    names = {f["path"] for f in data["figures"]}
    assert {"figures/probe_by_layer.png", "figures/ablation_drops.png", "figures/ood_length.png"} <= names
    report = (out / "report.md").read_text()
    assert TITLE in report and "Parameter counts" in report
    cells = data["results"]["cells"]
    p = PRESETS["smoke"]
    ran = {c["arch"] for c in cells}
    assert {"transformer", "lstm", "gru"} <= ran
    # every architecture is either run or listed as unavailable with a reason
    assert set(p.archs) <= ran | set(data["results"]["unavailable"])
    for c in cells:
        assert c["params"] > 0
        assert set(map(int, c["acc_by_len"])) == set(p.eval_lens)
        assert c["learned"] == (c["acc_by_len"][str(p.train_len)] >= p.learned_acc)
        if c["arch"] != "mamba-noconv":
            assert len(c["probes"]) == p.n_layers + 1
            assert 0 <= c["best_layer"] <= p.n_layers
            assert set(c["ablation"]) == {"probe_dir", "random_dir", "probe_subspace", "pca", "random_subspace"}
            assert len(c["layer_ablation_drop"]) == p.n_layers + 1
        if c["task"] in p.patch_tasks and c["arch"] != "mamba-noconv":
            assert len(c["patching"]["at_last_pos"]) == p.n_layers + 1
    # params matched to the transformer's within 10% (same task; Mamba-2 widths come in steps of 64)
    ref = {c["task"]: c["params"] for c in cells if c["arch"] == "transformer"}
    for c in cells:
        assert abs(c["params"] - ref[c["task"]]) <= 0.1 * ref[c["task"]], (c["arch"], c["task"], c["params"])


def test_claims_computed_from_cells(smoke):
    _, res = smoke
    cells = {(c["arch"], c["task"]): c for c in res.results["cells"]}
    again = {c.id: c.holds for c in all_claims(cells)}
    assert again == {c.id: c.holds for c in res.claims}
    # a fabricated cell set flips a claim: the claims really read the measurements
    fake = {k: dict(v, learned=True) for k, v in cells.items()}
    for (a, t), c in fake.items():
        if a in ("lstm", "gru") and t == "parity":
            c["best_layer"] = 0
    assert {c.id: c for c in all_claims(fake)}["prefix_tasks_late_in_recurrent"].holds is False
    for (a, t), c in fake.items():
        if "probes" in c:
            c["best_layer"] = c["n_layers"] if a != "transformer" else 0
    assert {c.id: c for c in all_claims(fake)}["prefix_tasks_late_in_recurrent"].holds is True
    # cells that did not learn the task are not counted: with none learned, profile claims fail with a reason
    for (a, t), c in fake.items():
        if a in ("lstm", "gru") and t == "parity":
            c["learned"] = False
    late = {c.id: c for c in all_claims(fake)}["prefix_tasks_late_in_recurrent"]
    assert "lstm/parity" in late.evidence["not_learned"] and late.evidence["n_cells"] == late.evidence["n_late"]
    for c in fake.values():
        c["learned"] = False
    for cl in all_claims(fake):
        if cl.id != "conv1d_matters_for_prefix_not_dyck":
            assert cl.holds is False and cl.evidence["not_learned"] and "reason" in cl.evidence, cl.id


def test_bad_presets():
    with pytest.raises(ConfigError, match="architecture"):
        dataclasses.replace(PRESETS["smoke"], archs=["rnn"]).validate()
    with pytest.raises(ConfigError, match="train_len"):
        dataclasses.replace(PRESETS["smoke"], eval_lens=[60]).validate()
    with pytest.raises(ConfigError, match="preset"):
        load_study("state").run("huge", "/tmp/never")


def test_rerun_reuses_finished_cells_and_recomputes_a_torn_one(smoke, monkeypatch):
    """A killed run resumes cell by cell: saved cells are loaded, a damaged file is trained again."""
    import importlib

    state_run = importlib.import_module("dlmlab.studies.state.run")  # the module, not the run() it exports

    out, res = smoke
    before = json.loads((out / "results.json").read_text())
    files = sorted((out / "cells").glob("*.json"))
    assert len(files) == len(before["results"]["cells"])
    torn = files[0]
    torn.write_text(torn.read_text()[:50])
    calls = []
    real = state_run.run_cell
    monkeypatch.setattr(state_run, "run_cell", lambda a, task, *args, **kw: calls.append((a, task.name))
                        or real(a, task, *args, **kw))
    load_study("state").run("smoke", out, progress=False)
    arch, task = torn.stem.split("__")
    assert calls == [(arch, task)]
    after = json.loads((out / "results.json").read_text())
    strip = lambda cells: [{k: v for k, v in c.items() if not k.endswith("time_s")} for c in cells]  # noqa: E731
    assert strip(after["results"]["cells"]) == strip(before["results"]["cells"])
    assert after["claims"] == before["claims"]
