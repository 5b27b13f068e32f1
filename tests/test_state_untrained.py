"""No state claim passes on an untrained model (issue 34): every claim's judgement is fed measurements that the
study's own code (``cells.run_cell`` / ``analyse_model``, 200 control draws included) computed from untrained
models at a tiny size, and must not come out ``reproduced``."""

from __future__ import annotations

import dataclasses

import pytest

from dlmlab.studies.state import cells as cells_mod
from dlmlab.studies.state.claims import all_claims, direction_ablation
from dlmlab.studies.state.presets import PRESETS
from dlmlab.studies.state.seeds import SEED_REFS

P = dataclasses.replace(PRESETS["smoke"], d_model=16, n_layers=2, eval_lens=[40, 80], eval_seqs=8, probe_seqs=16,
                        probe_samples=200, probe_max_iter=50, patch_seqs=4, control_seqs=2, control_ood_seqs=2,
                        code_max_files=4)
ARCHS, TASKS = ("transformer", "mamba", "lstm", "gru"), ("parity", "s3", "dyck")


@pytest.fixture(scope="module")
def untrained():
    """{(arch, task): cell} of untrained models, Conv1D runs (3 seeds, untrained) and one untrained model's
    per-layer ablation with 200 draws per layer standing in for a pretrained checkpoint's result."""
    mp = pytest.MonkeyPatch()
    mp.setattr(cells_mod, "train_on_task", lambda *a, **k: [])  # run_cell then analyses the initial weights
    try:
        tasks = {t: cells_mod.make_task(t, P) for t in TASKS}
        data = {t: cells_mod.eval_data(tasks[t], P) for t in TASKS}
        cells = {(a, t): cells_mod.run_cell(a, tasks[t], data[t], P, progress=False) for a in ARCHS for t in TASKS}
        conv = {}
        for t in TASKS:
            for s in range(3):
                ps = dataclasses.replace(P, seed=P.seed + s)
                for v in ("mamba", "mamba-noconv"):
                    conv[(v, t, s)] = cells[("mamba", t)] if (v, s) == ("mamba", 0) else \
                        cells_mod.run_cell(v, tasks[t], data[t], ps, progress=False, analyse=False)
        model = cells_mod.build("transformer", tasks["parity"], P)
        res = cells_mod.analyse_model(model, data["parity"], P, layer_draws=True)
        c = cells[("transformer", "parity")]
        pre = dict(res, path="pretrained/untrained-gpt_neox", arch="gpt_neox", task="parity", train_len=P.train_len,
                   acc_by_len=c["acc_by_len"], summary={"chance": c["chance"][P.train_len]})
    finally:
        mp.undo()
    return cells, conv, [pre]


def test_every_claim_has_its_untrained_test():
    covered = {"prefix_tasks_late_in_recurrent", "prefix_tasks_gradual_in_transformer",
               "dyck_early_in_transformer_gradual_in_recurrent", "s3_groups_with_parity",
               "probe_direction_ablation_drops_accuracy", "conv1d_matters_for_prefix_not_dyck",
               "readability_vs_causality_split"}
    assert covered == set(SEED_REFS), "a new claim needs its cannot-pass-untrained test here"


@pytest.mark.study  # ~30-60 s: 12 untrained cells analysed with 200 control draws each
def test_no_claim_is_reproduced_by_untrained_models(untrained):
    cells, conv, pre = untrained
    assert not any(c["learned"] for c in cells.values())  # the models really are untrained
    claims = {c.id: c for c in all_claims(cells, conv, pre)}
    assert set(claims) == set(SEED_REFS)
    for cid, cl in claims.items():
        assert cl.verdict != "reproduced", (cid, cl.verdict, cl.detail)
        assert (cl.verdict, cl.reason) == ("inconclusive", "precondition"), (cid, cl.verdict, cl.reason, cl.detail)


@pytest.mark.study
def test_the_ablation_claim_fails_on_untrained_measurements_even_with_its_precondition_forced(untrained):
    """The precondition aside, an untrained model's probe subspace does not beat 200 random subspaces of equal rank
    in most cells (the measurement itself cannot pass without the mechanism)."""
    cells, _, _ = untrained
    forced = {}
    for k, c in cells.items():
        c = dict(c, acc_by_len={**c["acc_by_len"], P.train_len: 1.0},
                 above_chance_by_len={L: True for L in c["acc_by_len"]})
        forced[k] = c
    cl = direction_ablation(forced)
    assert cl.verdict != "reproduced", cl.detail
    n = cl.evidence["n_cells"]
    assert n == len(cells) and cl.evidence["n_wins_train_len"] <= n / 2 and cl.evidence["n_wins_unseen"] <= n / 2
