"""The state study end to end at the smoke preset: outputs, figures, claims, parameter counts."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from dlmlab.config import ConfigError
from dlmlab.studies import load_study
from dlmlab.studies.state import PRESETS, TITLE
from dlmlab.studies.state.claims import all_claims

CLAIMS = {"prefix_tasks_late_in_recurrent", "prefix_tasks_gradual_in_transformer", "dyck_early_in_transformer",
          "s3_groups_with_parity", "probe_direction_ablation_drops_accuracy", "conv1d_matters_for_prefix_not_dyck",
          "readability_vs_causality_split"}
# {claim: (verdict, reason)} of the seeded smoke run
SMOKE_VERDICTS = {"prefix_tasks_late_in_recurrent": ("inconclusive", "precondition"),
                  "prefix_tasks_gradual_in_transformer": ("inconclusive", "precondition"),
                  "dyck_early_in_transformer": ("reproduced", None),
                  "s3_groups_with_parity": ("inconclusive", "precondition"),
                  "probe_direction_ablation_drops_accuracy": ("contradicted", None),
                  "conv1d_matters_for_prefix_not_dyck": ("contradicted", None),
                  "readability_vs_causality_split": ("reproduced", None)}


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
        # a real bool (not 0 / 1) or None, and the one the verdict implies: True exactly when reproduced, None only
        # when nothing was evaluated (not run, or a precondition that left nothing to test)
        assert type(c["holds"]) is bool or c["holds"] is None, (c["id"], c["holds"])
        assert (c["holds"] is True) == (c["verdict"] == "reproduced"), (c["id"], c["verdict"], c["holds"])
        assert c["holds"] is not None or c["reason"] in ("not_run", "precondition"), (c["id"], c["reason"])
        if c["holds"] is None:
            assert "reason" in c["evidence"]
    # the seeded smoke run's verdicts (`dlmlab reproduce state --preset smoke`)
    assert {c["id"]: (c["verdict"], c["reason"]) for c in data["claims"]} == SMOKE_VERDICTS
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
        assert set(c["ablation"]) == {"probe_dir", "probe_subspace", "random_subspace"}
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


def _cell(arch, task, probe_acc, learned=True, above=True, **kw):
    return dict(arch=arch, task=task, probes=[{"accuracy": a} for a in probe_acc], n_layers=len(probe_acc) - 1,
                learned=learned, above_chance=above, **kw)


def test_claims_on_hand_built_profiles():
    """Each claim's computation on small hand-built profiles (4 blocks; layer 0 = embedding)."""
    from dlmlab.studies.state import claims as C

    late, early = [0.5, 0.55, 0.6, 0.62, 1.0], [0.5, 1.0, 1.0, 1.0, 1.0]
    assert C.largest_jump_layer(late) == 4 and C.largest_jump_layer(early) == 1
    cells = {(a, t): _cell(a, t, late) for a in ("mamba", "lstm") for t in ("parity", "s3")}
    cells[("gru", "parity")] = _cell("gru", "parity", early)  # beside: not counted
    cl = C.late_in_recurrent(cells)
    assert cl.holds is True and cl.evidence["beside"]["gru/parity"]["late"] is False
    cells[("lstm", "parity")] = _cell("lstm", "parity", early)  # the review's LSTM Parity: readable after block 1
    cl = C.late_in_recurrent(cells)
    assert cl.holds is False and list(cl.evidence["not_reproduced"]) == ["lstm/parity"]
    assert cl.evidence["not_reproduced"]["lstm/parity"]["largest_jump_enters"] == 1
    # gradual over the blocks: the embedding -> block 1 jump does not count
    tr = {("transformer", t): _cell("transformer", t, [0.2, 0.6, 0.7, 0.8, 0.9], learned=False) for t in C.PREFIX}
    cl = C.gradual_in_transformer(tr)
    assert cl.holds is True and cl.evidence["partial"] == ["transformer/parity", "transformer/s3"]
    tr[("transformer", "s3")] = _cell("transformer", "s3", [0.2, 0.3, 0.3, 0.3, 0.9])
    assert C.gradual_in_transformer(tr).holds is False  # one block adds all of the gain
    # Dyck: best block (not the embedding) in the first half
    assert C.dyck_early({("transformer", "dyck"): _cell("transformer", "dyck", [0.9, 0.5, 0.95, 0.9, 0.9])}).holds
    assert not C.dyck_early({("transformer", "dyck"): _cell("transformer", "dyck", [0.99, 0.5, 0.6, 0.9, 0.95])}).holds
    # S3 with Parity over the blocks only: an embedding value that differs does not matter
    grp = {("lstm", "s3"): _cell("lstm", "s3", [0.9, 0.2, 0.3, 0.4, 1.0]),
           ("lstm", "parity"): _cell("lstm", "parity", [0.1, 0.5, 0.55, 0.6, 1.0]),
           ("lstm", "dyck"): _cell("lstm", "dyck", [0.1, 1.0, 0.9, 0.8, 0.8])}
    cl = C.s3_with_parity(grp)
    assert cl.holds is True and cl.evidence["distances"]["lstm"]["d_parity"] < 0.1
    grp[("lstm", "dyck")]["above_chance"] = False
    assert C.s3_with_parity(grp).holds is False  # no architecture above chance on all three


def _ablation(ps, rs, lens=(40, 80, 120)):
    return {kind: {L: {"drop": d} for L, d in zip(lens, v)} for kind, v in
            (("probe_subspace", ps), ("random_subspace", rs))}


def test_direction_ablation_and_readability_claims():
    from dlmlab.studies.state import claims as C

    above = {40: True, 80: True, 120: True}
    cells = {("lstm", "s3"): _cell("lstm", "s3", [0.2, 0.5, 0.9, 1, 1], ablation=_ablation([0.5, 0.4, 0.4], [0, 0, 0.01]),
                                    train_len=40, above_chance_by_len=above),
             ("gru", "s3"): _cell("gru", "s3", [0.2, 0.5, 0.9, 1, 1], ablation=_ablation([0.5, 0.0, 0.0], [0, 0, 0]),
                                  train_len=40, above_chance_by_len={40: True, 80: False, 120: False})}
    cl = C.direction_ablation(cells)
    # gru is at chance at the unseen lengths: counted at the training length only
    assert cl.holds is True and cl.evidence["n_cells_unseen"] == 1
    assert cl.evidence["at_chance_at_unseen_lengths"] == ["gru/s3"]
    cells[("lstm", "s3")]["ablation"] = _ablation([0.5, 0.02, 0.02], [0, 0.01, 0.01])
    assert C.direction_ablation(cells).holds is False  # no drop beyond the random subspace at 80-120
    # causal block: largest drop among blocks whose drop clears the random control by 0.05
    assert C.causal_block([0.3, 0.6, 0.1, 0.0], [0.0, 0.58, 0.0, 0.0]) == 1  # block 2's drop is the control's
    assert C.causal_block([0.02, 0.03, 0.0, 0.0], [0.0] * 4) is None  # all-zero-ish drops: no causal block
    rc = {("lstm", "s3"): _cell("lstm", "s3", [0.2, 0.5, 0.9, 1.0, 1.0],
                                layer_ablation_drop=[0.9, 0.0, 0.0, 0.5, 0.0], layer_random_drop=[0.0] * 5),
          ("gru", "s3"): _cell("gru", "s3", [0.2, 0.5, 0.9, 1.0, 1.0],
                               layer_ablation_drop=[0.9, 0.0, 0.0, 0.0, 0.0], layer_random_drop=[0.0] * 5)}
    cl = C.readability_causality(rc)
    # lstm: readable at block 3, causal at block 3 (the embedding's drop of 0.9 does not count); gru: none
    assert cl.evidence["cells"]["lstm/s3"] == dict(cl.evidence["cells"]["lstm/s3"], readable_block=3, causal_block=3)
    assert cl.holds is False and cl.evidence["no_causal_block"] == ["gru/s3"]
    rc[("lstm", "s3")]["layer_ablation_drop"] = [0.0, 0.3, 0.0, 0.1, 0.0]
    assert C.readability_causality(rc).holds is True


def test_conv1d_claim_intervals():
    from dlmlab.studies.state import claims as C

    rng = np.random.default_rng(0)

    def run(acc):
        return {"acc_by_len": {40: acc, 80: acc}, "acc_per_seq": {40: list(acc + rng.normal(0, 0.01, 32)),
                                                                  80: list(acc + rng.normal(0, 0.01, 32))}}

    drops = {"parity": 0.07, "s3": 0.12, "dyck": 0.0}
    conv = {}
    for t, d in drops.items():
        for s in range(3):
            conv[("mamba", t, s)] = run(0.8)
            conv[("mamba-noconv", t, s)] = run(0.8 - d)
    cl = C.conv1d(conv)
    assert cl.holds is True and cl.evidence["s3_drop"]["lo"] > 0.1 and cl.evidence["dyck_drop"]["n"] == 3
    assert cl.evidence["dyck_drop"]["lo"] <= 0 <= cl.evidence["dyck_drop"]["hi"]
    del conv[("mamba-noconv", "dyck", 2)]
    assert C.conv1d(conv).holds is None  # fewer than 3 seeds
    for s in range(3):  # Dyck now loses accuracy too
        conv[("mamba-noconv", "dyck", s)] = run(0.7)
    assert C.conv1d(conv).holds is False


def test_no_weight_decay_on_ssm_parameters():
    """The study's optimiser leaves A_log, D and the dt bias of Mamba / Mamba-2 out of weight decay."""
    import torch

    from dlmlab.studies.state.cells import build, make_task
    from dlmlab.training import TrainConfig, make_optimizer

    p = PRESETS["smoke"]
    for arch in ("mamba", "mamba2"):
        model = build(arch, make_task("parity", p), p)
        opt = make_optimizer(model, TrainConfig(weight_decay=0.1))
        decayed = {id(q) for g in opt.param_groups if g["weight_decay"] > 0 for q in g["params"]}
        names = {n for n, q in model.named_parameters() if id(q) in decayed}
        ssm = [n for n, _ in model.named_parameters() if n.rsplit(".", 1)[-1] in ("A_log", "D", "dt_bias")
               or n.endswith("dt_proj.bias")]
        assert ssm and not set(ssm) & names, (arch, sorted(set(ssm) & names))
        assert any(isinstance(q, torch.nn.Parameter) and q.dim() >= 2 for q in opt.param_groups[0]["params"])


def test_saved_cells_ignore_the_pretrained_part_settings():
    import importlib

    state_run = importlib.import_module("dlmlab.studies.state.run")
    p = PRESETS["smoke"]
    same = dataclasses.replace(p, pretrain_small="", pretrained_paths=["/ckpt/x"], pretrained_steps=7)
    assert state_run._cell_config(same) == state_run._cell_config(p)
    assert state_run._cell_config(dataclasses.replace(p, default_steps=26)) != state_run._cell_config(p)
