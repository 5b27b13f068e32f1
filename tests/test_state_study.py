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
    assert {"figures/probe_by_layer.png", "figures/ablation_drops.png", "figures/ood_length.png",
            "figures/training_curves.png", "figures/patching_grid.png"} <= names
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
        L = str(p.train_len)
        assert c["learned"] == (c["acc_by_len"][L] >= p.learned_acc)
        assert c["above_chance"] == (c["acc_by_len"][L] >= c["chance"][L] + p.chance_margin)
        assert c["acc_by_len"][L] == pytest.approx(sum(c["acc_per_seq"][L]) / p.eval_seqs)
        assert len(c["curve"]) >= 10 and c["curve"][-1][0] == c["steps"]
        assert len(c["probes"]) == p.n_layers + 1
        assert 1 <= c["best_block"] <= p.n_layers
        assert set(c["ablation"]) == {"probe_dir", "random_dir", "probe_subspace", "random_subspace"}
        assert len(c["layer_ablation_drop"]) == len(c["layer_random_drop"]) == p.n_layers + 1
        assert len(c["patching"]["at_last_pos"]) == p.n_layers + 1  # every task is patched
    # Conv1D ablation: Mamba with (seeds 1, 2; seed 0 is the main cell) and without Conv1D (seeds 0-2)
    conv = {(c["arch"], c["task"], c["seed"]) for c in data["results"]["conv_runs"]}
    assert conv == {(v, t, s) for t in p.conv_tasks for v, s in
                    [("mamba", 1), ("mamba", 2), ("mamba-noconv", 0), ("mamba-noconv", 1), ("mamba-noconv", 2)]}
    cv = {c["id"]: c for c in data["claims"]}["conv1d_matters_for_prefix_not_dyck"]["evidence"]
    assert cv["parity_drop"]["n"] == 3 and cv["parity_drop"]["lo"] <= cv["parity_drop"]["mean"] <= cv["parity_drop"]["hi"]
    # params matched to the transformer's within 10% (same task; Mamba-2 widths come in steps of 64)
    ref = {c["task"]: c["params"] for c in cells if c["arch"] == "transformer"}
    for c in cells + data["results"]["conv_runs"]:
        assert abs(c["params"] - ref[c["task"]]) <= 0.1 * ref[c["task"]], (c["arch"], c["task"], c["params"])


def test_claims_computed_from_cells(smoke):
    import importlib

    state_run = importlib.import_module("dlmlab.studies.state.run")
    _, res = smoke
    cells = {(c["arch"], c["task"]): c for c in res.results["cells"]}
    conv = {(c["arch"], c["task"], c["seed"]): c for c in res.results["conv_runs"]}
    conv.update({("mamba", t, 0): cells[("mamba", t)] for t in PRESETS["smoke"].conv_tasks})
    again = {c.id: c.holds for c in all_claims(cells, conv)}
    assert again == {c.id: c.holds for c in res.claims}
    assert state_run.status({"learned": True, "above_chance": True}) == "learned"
    # a fabricated cell set flips a claim: the claims really read the measurements
    fake = {k: dict(v, above_chance=True, learned=True) for k, v in cells.items()}
    up = [{"accuracy": a} for a in (0.5, 0.6, 0.7)]  # largest jump enters layer 1
    late = [{"accuracy": a} for a in (0.5, 0.55, 1.0)]  # ... enters the last layer
    for (a, t), c in fake.items():
        if a in ("lstm", "mamba") and t == "parity":
            c["probes"] = up
    assert {c.id: c for c in all_claims(fake)}["prefix_tasks_late_in_recurrent"].holds is False
    for (a, t), c in fake.items():
        if a in ("lstm", "mamba", "gru") and t in ("parity", "s3"):
            c["probes"] = late
    assert {c.id: c for c in all_claims(fake)}["prefix_tasks_late_in_recurrent"].holds is True
    # cells at chance are not counted; partial ones are counted and marked
    fake[("lstm", "parity")].update(above_chance=False, learned=False, probes=up)
    fake[("mamba", "s3")].update(learned=False)
    cl = {c.id: c for c in all_claims(fake)}["prefix_tasks_late_in_recurrent"]
    assert cl.holds is True and "lstm/parity" in cl.evidence["at_chance"] and cl.evidence["partial"] == ["mamba/s3"]
    for c in fake.values():
        c["above_chance"] = c["learned"] = False
    for cl in all_claims(fake):
        if cl.id != "conv1d_matters_for_prefix_not_dyck":
            assert cl.holds is False and cl.evidence["at_chance"] and "reason" in cl.evidence, cl.id


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
    assert len(files) == len(before["results"]["cells"]) + len(before["results"]["conv_runs"])
    torn = files[0]
    torn.write_text(torn.read_text()[:50])
    calls = []
    real = state_run.run_cell
    monkeypatch.setattr(state_run, "run_cell", lambda a, task, *args, **kw: calls.append((a, task.name))
                        or real(a, task, *args, **kw))
    load_study("state").run("smoke", out, progress=False)
    arch, task = torn.stem.split("__")[:2]
    assert calls == [(arch, task)]
    after = json.loads((out / "results.json").read_text())
    strip = lambda cells: [{k: v for k, v in c.items() if not k.endswith("time_s")} for c in cells]  # noqa: E731
    assert strip(after["results"]["cells"]) == strip(before["results"]["cells"])
    assert after["claims"] == before["claims"]
