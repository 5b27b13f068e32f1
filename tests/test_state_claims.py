"""The state study's claim definitions (issue 27) on hand-made cells: each rewritten definition pinned in each
direction, the "learned" precondition (also when the claim's profile holds), the `scale` reason for single-seed
mechanism results short of their margin, and the Conv1D intervals (t over seeds, n shown; Dyck by equivalence)."""

from __future__ import annotations

import numpy as np
import pytest

from dlmlab.studies.state import claims as C
from dlmlab.studies.state import claims_mech

LATE, EARLY, GRADUAL = [0.5, 0.55, 0.6, 0.62, 1.0], [0.5, 1.0, 1.0, 1.0, 1.0], [0.2, 0.5, 0.65, 0.8, 0.95]
ABRUPT = [0.2, 0.3, 0.3, 0.3, 0.9]  # one block adds all of the gain (and it is the last one: "late")
CHANCE = {"parity": 0.5, "s3": 0.18, "dyck": 0.25}


def vj(cl):
    return cl.verdict, cl.reason


def cell(arch, task, probe_acc, acc=1.0, **kw):
    """A cell with probe accuracies [layer 0 ... n] and task accuracy ``acc`` at the training length 40."""
    ch = CHANCE.get(task, 0.3)
    return dict(arch=arch, task=task, probes=[{"accuracy": a} for a in probe_acc], n_layers=len(probe_acc) - 1,
                train_len=40, acc_by_len={40: acc}, chance={40: ch}, above_chance=acc >= ch + 0.1, **kw)


def test_learned_is_ninety_percent_of_the_way_from_chance():
    assert C.is_learned(cell("mamba", "parity", LATE, acc=0.95))
    assert not C.is_learned(cell("mamba", "parity", LATE, acc=0.94))  # chance + 0.1 would count 0.6
    assert C.is_learned(cell("mamba", "s3", LATE, acc=0.92)) and not C.is_learned(cell("mamba", "s3", LATE, acc=0.91))
    assert not C.is_learned(cell("mamba", "s3", LATE, acc=0.19))  # the cpu run's Mamba at chance on S3
    # hand-built cells without accuracies fall back to their flags
    assert C.is_learned({"learned": True}) and not C.is_learned({"learned": True, "above_chance": False})


def test_late_in_recurrent_checks_every_cell_it_names():
    cells = {(a, t): cell(a, t, LATE) for a in ("mamba", "lstm") for t in C.PREFIX}
    assert vj(C.late_in_recurrent(cells)) == ("reproduced", None)
    # the profile holds in every learned cell, but Mamba never learned S3: precondition, not reproduced
    cells[("mamba", "s3")] = cell("mamba", "s3", LATE, acc=0.19)
    cl = C.late_in_recurrent(cells)
    assert vj(cl) == ("inconclusive", "precondition") and cl.evidence["at_chance"] == ["mamba/s3"]
    assert "mamba/s3 (acc 0.19 < learned level 0.92" in cl.detail
    # a partly trained cell (above chance, not learned) no longer counts either
    cells[("mamba", "s3")] = cell("mamba", "s3", LATE, acc=0.7)
    assert C.late_in_recurrent(cells).evidence["partial"] == ["mamba/s3"]
    # a learned cell with the largest jump elsewhere contradicts, whatever the other cells' preconditions
    cells[("lstm", "parity")] = cell("lstm", "parity", EARLY)
    assert vj(C.late_in_recurrent(cells)) == ("contradicted", None)


def test_gradual_in_transformer():
    tr = {("transformer", t): cell("transformer", t, GRADUAL) for t in C.PREFIX}
    assert vj(C.gradual_in_transformer(tr)) == ("reproduced", None)
    tr[("transformer", "s3")] = cell("transformer", "s3", GRADUAL, acc=0.6)  # partial: counted before issue 27
    assert vj(C.gradual_in_transformer(tr)) == ("inconclusive", "precondition")
    tr[("transformer", "parity")] = cell("transformer", "parity", ABRUPT)
    assert vj(C.gradual_in_transformer(tr)) == ("contradicted", None)


def test_dyck_inversion_needs_both_halves():
    cells = {("transformer", "dyck"): cell("transformer", "dyck", [0.9, 0.5, 0.95, 0.9, 0.9]),
             ("mamba", "dyck"): cell("mamba", "dyck", GRADUAL), ("lstm", "dyck"): cell("lstm", "dyck", GRADUAL)}
    cl = C.dyck_inversion(cells)
    assert vj(cl) == ("reproduced", None) and cl.id == "dyck_early_in_transformer_gradual_in_recurrent"
    # the old definition (the Transformer half alone) held here; the recurrent half does not: LSTM is abrupt
    cells[("lstm", "dyck")] = cell("lstm", "dyck", ABRUPT)
    cl = C.dyck_inversion(cells)
    assert vj(cl) == ("contradicted", None) and "lstm/dyck" in cl.detail
    cells[("lstm", "dyck")] = cell("lstm", "dyck", GRADUAL)
    cells[("transformer", "dyck")] = cell("transformer", "dyck", [0.99, 0.5, 0.6, 0.9, 0.95])  # best block 4
    assert vj(C.dyck_inversion(cells)) == ("contradicted", None)
    cells[("transformer", "dyck")] = cell("transformer", "dyck", [0.9, 0.5, 0.95, 0.9, 0.9])
    cells[("mamba", "dyck")] = cell("mamba", "dyck", GRADUAL, acc=0.5)
    assert vj(C.dyck_inversion(cells)) == ("inconclusive", "precondition")
    del cells[("lstm", "dyck")]
    assert vj(C.dyck_inversion(cells)) == ("inconclusive", "not_run")


def test_s3_groups_with_parity_by_the_studys_profile_descriptors():
    assert C.profile_kinds(cell("lstm", "parity", LATE)) == ["late"]
    assert C.profile_kinds(cell("lstm", "dyck", EARLY)) == ["early"]
    assert C.profile_kinds(cell("transformer", "s3", GRADUAL)) == ["gradual"]
    grp = {("lstm", "s3"): cell("lstm", "s3", LATE), ("lstm", "parity"): cell("lstm", "parity", LATE),
           ("lstm", "dyck"): cell("lstm", "dyck", GRADUAL)}
    cl = C.s3_with_parity(grp)
    assert vj(cl) == ("reproduced", None) and cl.evidence["profiles"]["lstm"]["kinds"]["s3"] == ["late"]
    # S3 gradual like Dyck, Parity late: S3 groups with Dyck
    grp[("lstm", "s3")] = cell("lstm", "s3", GRADUAL)
    assert vj(C.s3_with_parity(grp)) == ("contradicted", None)
    # the old definition (min-max normalised distance) called these close to Parity; the descriptors differ: the
    # S3 profile is gradual (each block adds <= 60%), Parity's is late (its last block adds most)
    old = {("lstm", "s3"): cell("lstm", "s3", [0.2, 0.4, 0.55, 0.7, 0.95]),
           ("lstm", "parity"): cell("lstm", "parity", [0.5, 0.52, 0.55, 0.6, 1.0]),
           ("lstm", "dyck"): cell("lstm", "dyck", EARLY)}
    assert vj(C.s3_with_parity(old)) == ("contradicted", None)
    old[("lstm", "dyck")] = cell("lstm", "dyck", EARLY, acc=0.3)
    assert vj(C.s3_with_parity(old)) == ("inconclusive", "precondition")


def _ablation(ps, rs, lens=(40, 80, 120)):
    return {kind: {L: {"drop": d} for L, d in zip(lens, v)} for kind, v in
            (("probe_subspace", ps), ("random_subspace", rs))}


def _controls(train_value, ood_value, sd=0.005, lens=(80, 120)):
    """>= 200 random-subspace draws N(0, sd) at the training length and at each unseen length (same subspaces)."""
    draws = list(np.random.default_rng(0).normal(0.0, sd, 200))
    return {"control": {"value": train_value, "draws": draws, "n_seqs": 16},
            "control_ood": {"n_seqs": 6, "value_by_len": {L: ood_value for L in lens},
                            "draws_by_len": {L: draws for L in lens}}}


def test_direction_ablation_short_of_its_margin_is_scale():
    above = {40: True, 80: True, 120: True}

    def one(value, ood=None, acc=1.0, controls=True):
        return {("lstm", "s3"): cell("lstm", "s3", GRADUAL, acc=acc, ablation=_ablation([0.5, 0.4, 0.4], [0, 0, 0]),
                                     above_chance_by_len=above,
                                     **(_controls(value, value if ood is None else ood) if controls else {}))}

    assert vj(C.direction_ablation(one(0.3))) == ("reproduced", None)
    cl = C.direction_ablation(one(0.015))  # beats its 200 draws (3 sd), by less than 0.02
    assert vj(cl) == ("inconclusive", "scale") and "short of the margin" in cl.detail
    # issue 34: above the draws' median but not beating them (p > 0.05) is a loss, not "scale"
    cl = C.direction_ablation(one(0.004))
    assert vj(cl) == ("contradicted", None) and cl.evidence["cells"]["lstm/s3"]["train"]["outcome"] == "loses"
    # the unseen lengths have their own 200 draws: a win at the training length does not carry over
    cl = C.direction_ablation(one(0.3, ood=0.0))
    assert vj(cl) == ("contradicted", None)
    assert cl.evidence["cells"]["lstm/s3"]["unseen"]["control"]["n_draws"] == 200
    # a stored run with one random subspace per length (no draws) cannot win, however large the gap
    cl = C.direction_ablation(one(0.3, controls=False))
    assert vj(cl) == ("contradicted", None) and "without >= 200 control draws" in cl.detail
    assert vj(C.direction_ablation(one(0.3, acc=0.5))) == ("inconclusive", "precondition")


def _pre(arch, drops, ctrl=None, acc=1.0, probe=(0.5, 0.6, 0.95, 1.0, 1.0)):
    """A pretrained-checkpoint result: readable block 3 by default."""
    return {"path": f"pretrained/{arch}-cpu", "arch": arch, "train_len": 40, "acc_by_len": {"40": acc, "80": acc},
            "summary": {"chance": 0.5}, "probes": [{"accuracy": a} for a in probe],
            "layer_ablation_drop": list(drops), "layer_random_drop": list(ctrl or [0.0] * len(drops))}


def test_readability_vs_causality_is_judged_on_the_pretrained_models():
    split = [0.0, 0.3, 0.0, 0.1, 0.0]  # causal block 1, readable block 3
    same = [0.0, 0.0, 0.0, 0.5, 0.0]  # causal block 3 = readable block
    cl = C.readability_causality([_pre("gpt_neox", split), _pre("mamba", split)])
    assert vj(cl) == ("reproduced", None) and cl.evidence["models"]["mamba:mamba-cpu"]["causal_block"] == 1
    assert vj(C.readability_causality([_pre("gpt_neox", split), _pre("mamba", same)])) == ("contradicted", None)
    # no block clears its random control by 0.05, but block 1 beats it: a single-seed result short of the margin
    cl = C.readability_causality([_pre("gpt_neox", split), _pre("mamba", [0.0, 0.04, 0.0, 0.0, 0.0])])
    assert vj(cl) == ("inconclusive", "scale") and "block 1: drop 0.040 vs random subspace 0.000" in cl.detail
    assert vj(C.readability_causality([_pre("mamba", [0.0] * 5, [0.0, 0.1, 0.1, 0.1, 0.1])])) == ("contradicted", None)
    # a checkpoint that did not learn the task: precondition (learned level 0.95 at chance 0.5)
    assert vj(C.readability_causality([_pre("gpt_neox", split), _pre("mamba", split, acc=0.9)])) == \
        ("inconclusive", "precondition")
    # toy cells are reported beside and decide nothing
    toy = {("lstm", "s3"): cell("lstm", "s3", GRADUAL, layer_ablation_drop=same, layer_random_drop=[0.0] * 5)}
    cl = C.readability_causality([], toy)
    assert vj(cl) == ("inconclusive", "not_run") and cl.evidence["toy_cells"]["n_cells"] == 1
    assert vj(C.readability_causality([_pre("mamba", split)], toy)) == ("reproduced", None)


def _conv(drops, noise=0.01, acc=0.99, learned_s3=True):
    """Mamba with / without Conv1D, 3 seeds; ``drops[task]``: one drop or one per seed."""
    rng = np.random.default_rng(0)

    def run(a, t, learned=True):
        a_ = a if learned else CHANCE[t]
        return {"acc_by_len": {40: a_}, "acc_per_seq": {40: list(a_ + rng.normal(0, noise, 32))}, "train_len": 40,
                "chance": {40: CHANCE[t]}}

    out = {}
    for t, d in drops.items():
        for s in range(3):
            ds = d[s] if isinstance(d, list) else d
            out[("mamba", t, s)] = run(acc, t, learned_s3 or t != "s3")
            out[("mamba-noconv", t, s)] = run(acc - ds, t)
    return out


def test_conv1d_intervals_over_seeds_and_dyck_equivalence():
    cl = C.conv1d(_conv({"parity": 0.07, "s3": 0.12, "dyck": 0.0}))
    assert vj(cl) == ("reproduced", None)
    assert "(n=3 seeds, t)" in cl.evidence["measured"] and cl.evidence["dyck_drop"]["n"] == 3
    assert cl.evidence["equivalence_margin"] == C.EQUIV_MARGIN == 0.05
    # Dyck: a small, consistent drop inside the margin is "no cost" (the old "interval contains 0" said contradicted)
    assert vj(C.conv1d(_conv({"parity": 0.07, "s3": 0.12, "dyck": 0.01}, noise=0.001))) == ("reproduced", None)
    # Dyck: a wide interval containing 0 is no evidence of "no cost" (the old definition: reproduced)
    cl = C.conv1d(_conv({"parity": 0.07, "s3": 0.12, "dyck": [0.1, -0.1, 0.0]}))
    assert vj(cl) == ("inconclusive", "underpowered") and "not inside +-0.05" in cl.detail
    cl = C.conv1d(_conv({"parity": 0.07, "s3": 0.12, "dyck": 0.2}))
    assert vj(cl) == ("contradicted", None) and "dyck drop" in cl.detail
    # prefix tasks: a t-interval spanning 0 is underpowered; one below 0 contradicts
    assert vj(C.conv1d(_conv({"parity": [0.1, -0.1, 0.0], "s3": 0.12, "dyck": 0.0}))) == ("inconclusive", "underpowered")
    assert vj(C.conv1d(_conv({"parity": -0.05, "s3": 0.12, "dyck": 0.0}))) == ("contradicted", None)
    # Mamba with Conv1D at chance on S3: its drop cannot be judged, also when the other parts reproduce
    cl = C.conv1d(_conv({"parity": 0.07, "s3": 0.0, "dyck": 0.0}, learned_s3=False))
    assert vj(cl) == ("inconclusive", "precondition") and "did not learn s3 in 3 of 3 seeds" in cl.detail
    short = _conv({"parity": 0.07, "s3": 0.12, "dyck": 0.0})
    del short[("mamba-noconv", "dyck", 2)]
    assert vj(C.conv1d(short)) == ("inconclusive", "not_run")


@pytest.mark.parametrize("lo90,hi90,lo,hi,want", [
    (-0.02, 0.03, -0.03, 0.04, ("reproduced", None)),  # inside +-0.05
    (-0.02, 0.06, -0.03, 0.07, ("inconclusive", "underpowered")),  # reaches past the margin
    (0.07, 0.09, 0.06, 0.10, ("contradicted", None)),  # wholly above the margin
    (-0.2, -0.1, -0.22, -0.08, ("contradicted", None)),  # wholly below -margin: removing Conv1D helps a lot
])
def test_equivalence_verdict_on_known_intervals(lo90, hi90, lo, hi, want):
    from dlmlab.report.intervals import Interval

    j = C.equivalence_verdict(Interval((lo + hi) / 2, lo, hi, 3), Interval((lo + hi) / 2, lo90, hi90, 3, level=0.9),
                              0.05, "drop")
    assert (j.verdict, j.reason) == want


def test_training_stops_once_the_check_batch_is_learned():
    from dlmlab.studies.state.cells import build, check_set, make_task, train_on_task
    from dlmlab.studies.state.presets import PRESETS

    p = PRESETS["smoke"]
    task = make_task("parity", p)
    check = check_set(task, p)
    full = train_on_task(build("lstm", task, p), task, p, False, "x", steps=20, arch="lstm", check=check)
    assert [r["step"] for r in full] == list(range(2, 21, 2)) and all(0 <= r["check_acc"] <= 1 for r in full)
    stopped = train_on_task(build("lstm", task, p), task, p, False, "x", steps=20, arch="lstm", check=check,
                            stop_at=0.0)  # any accuracy reaches 0: stops at the first check
    assert [r["step"] for r in stopped] == [2] and "loss" in stopped[0] and "acc" in stopped[0]


def test_profile_claims_over_seeds_use_a_t_interval_of_the_margin():
    late = [[0.5, 0.55, 0.6, 0.62, 1.0], [0.5, 0.52, 0.6, 0.65, 0.98], [0.5, 0.56, 0.58, 0.6, 0.99]]
    cells = {(a, t): cell(a, t, late[0]) for a in ("mamba", "lstm") for t in C.PREFIX}
    seeds = {k: [cell(*k, late[1]), cell(*k, late[2])] for k in cells}
    cl = C.late_in_recurrent(cells, seeds)
    assert vj(cl) == ("reproduced", None) and "(n=3 seeds, t)" in cl.evidence["measured"]
    assert cl.evidence["cells"]["lstm/s3"]["interval"]["n"] == 3
    # one seed of lstm/parity is early, the others late: the interval over seeds spans 0
    seeds[("lstm", "parity")] = [cell("lstm", "parity", EARLY), cell("lstm", "parity", late[2])]
    cl = C.late_in_recurrent(cells, seeds)
    assert vj(cl) == ("inconclusive", "underpowered") and "lstm/parity late margin" in cl.detail
    seeds[("lstm", "parity")] = [cell("lstm", "parity", EARLY), cell("lstm", "parity", [0.5, 1.0, 1.0, 0.99, 1.0])]
    cells[("lstm", "parity")] = cell("lstm", "parity", [0.5, 0.98, 1.0, 1.0, 1.0])
    assert vj(C.late_in_recurrent(cells, seeds)) == ("contradicted", None)
    # most seeds must have learned: 1 of 3 -> precondition; 2 of 3 -> judged on those two
    seeds[("lstm", "parity")] = [cell("lstm", "parity", late[1], acc=0.5), cell("lstm", "parity", late[2], acc=0.6)]
    cells[("lstm", "parity")] = cell("lstm", "parity", late[0])
    cl = C.late_in_recurrent(cells, seeds)
    assert vj(cl) == ("inconclusive", "precondition") and "learned in 1 of 3 seeds" in cl.detail
    seeds[("lstm", "parity")][1] = cell("lstm", "parity", late[2])
    cl = C.late_in_recurrent(cells, seeds)
    assert vj(cl) == ("reproduced", None) and cl.evidence["cells"]["lstm/parity"]["n_seeds"] == 2


def test_dyck_and_grouping_over_seeds():
    dy = {("transformer", "dyck"): cell("transformer", "dyck", [0.9, 0.5, 0.95, 0.9, 0.9]),
          ("mamba", "dyck"): cell("mamba", "dyck", GRADUAL), ("lstm", "dyck"): cell("lstm", "dyck", GRADUAL)}
    seeds = {("lstm", "dyck"): [cell("lstm", "dyck", [0.2, 0.45, 0.6, 0.8, 0.95]),
                                cell("lstm", "dyck", [0.2, 0.5, 0.7, 0.8, 0.96])]}
    cl = C.dyck_inversion(dy, seeds)
    assert vj(cl) == ("reproduced", None) and cl.evidence["cells"]["lstm/dyck"]["interval"]["n"] == 3
    # S3 grouping per seed: an architecture groups when most of its complete seeds do
    grp = {("lstm", "s3"): cell("lstm", "s3", LATE), ("lstm", "parity"): cell("lstm", "parity", LATE),
           ("lstm", "dyck"): cell("lstm", "dyck", GRADUAL)}
    more = {("lstm", "s3"): [cell("lstm", "s3", GRADUAL), cell("lstm", "s3", GRADUAL)],
            ("lstm", "parity"): [cell("lstm", "parity", LATE)] * 2, ("lstm", "dyck"): [cell("lstm", "dyck", GRADUAL)] * 2}
    cl = C.s3_with_parity(grp, more)
    assert vj(cl) == ("contradicted", None) and [x["grouped"] for x in cl.evidence["profiles"]["lstm"]["seeds"]] == \
        [True, False, False]
    more[("lstm", "s3")][1] = cell("lstm", "s3", LATE)
    assert vj(C.s3_with_parity(grp, more)) == ("reproduced", None)


def test_random_controls_with_200_draws_decide_the_ablation_claims():
    draws = list(np.random.default_rng(0).normal(0.0, 0.01, 200))
    assert claims_mech.beats_control(0.2, draws, 0.02)[0] == "wins"
    assert claims_mech.beats_control(0.02, draws, 0.02)[0] == "short"  # beats most draws, not by the margin
    assert claims_mech.beats_control(-0.01, draws, 0.02)[0] == "loses"
    with pytest.raises(ValueError, match="200 draws"):
        claims_mech.beats_control(0.2, draws[:20], 0.02)
    above = {40: True, 80: True, 120: True}

    def one(value):  # the single random subspace says "wins" every time: the distribution decides
        ctl = _controls(value, value, sd=0.01)
        return {("lstm", "s3"): cell("lstm", "s3", GRADUAL, ablation=_ablation([0.5, 0.4, 0.4], [0, 0, 0]),
                                     above_chance_by_len=above, **ctl)}

    cl = C.direction_ablation(one(0.3))
    assert vj(cl) == ("reproduced", None) and cl.evidence["cells"]["lstm/s3"]["train"]["control"]["n_draws"] == 200
    # 1.5 sd above the draws' median, p > 0.05: it does not beat its control (issue 34: no longer "scale")
    assert vj(C.direction_ablation(one(0.015))) == ("contradicted", None)
    assert vj(C.direction_ablation(one(-0.05))) == ("contradicted", None)
    # per-layer distributions on a pretrained model: block 1 clears its draws, readable block 3 -> split
    layer = [{"value": v, "draws": draws} for v in (0.0, 0.3, 0.0, 0.02, 0.0)]
    r = dict(_pre("mamba", [0.0] * 5), layer_control=layer)
    cl = C.readability_causality([r])
    assert vj(cl) == ("reproduced", None) and cl.evidence["models"]["mamba:mamba-cpu"]["causal_block"] == 1
    layer[1]["value"] = 0.04  # above the draws' median, not by 0.05: short of the margin
    cl = C.readability_causality([dict(r, layer_control=layer)])
    assert vj(cl) == ("inconclusive", "scale") and "median of its draws" in cl.detail
