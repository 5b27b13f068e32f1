"""The real-data reversal claim's verdict, from built measurements (no training).

Fewer seeds than the claim's minimum -> inconclusive / underpowered; else each positional encoding's paired
MDM-minus-ARM reverse-accuracy interval decides its part (above 0: reproduced; below 0: contradicted; reaching 0:
underpowered) and one contradicted encoding contradicts the claim.  Whether it holds does not change.
"""

from __future__ import annotations

from dlmlab.report.claims import Claim
from dlmlab.report.intervals import paired_diff_ci
from dlmlab.studies.reversal.real import MIN_SEEDS, real_claim


def _real(per_pe: dict[str, tuple[list[float], list[float]]], fwd: float = 1.0) -> dict:
    """A ``run_real`` result: per PE, (MDM, ARM) reverse accuracy per seed; every model's forward accuracy ``fwd``."""
    runs = []
    for pe, (mdm, arm) in per_pe.items():
        for kind, vals in (("mdm", mdm), ("arm", arm)):
            runs += [{"kind": kind, "positions": pe, "seed": s, "reverse_acc": v, "reverse_acc_per_token": v,
                      "forward_acc": fwd, "forward_train_acc_per_token": fwd, "reverse_distinct_argmax": 3,
                      "forward_train_distinct_argmax_per_token": 3} for s, v in enumerate(vals)]
    n = len(next(iter(per_pe.values()))[0])
    return {"runs": runs, "seeds": list(range(n)), "chance": 0.1}


def v(c: Claim) -> tuple[str, str | None]:
    assert (c.verdict == "reproduced") == (c.holds is True) and c.holds is not None, (c.verdict, c.holds)
    assert c.reason != "unjudged"
    d = c.to_dict()
    assert (d["verdict"], d["reason"], d["holds"]) == (c.verdict, c.reason, c.holds)
    return c.verdict, c.reason


ABOVE = ([0.4, 0.5, 0.45], [0.15, 0.2, 0.17])  # MDM wins on every seed
BELOW = ([0.1, 0.12, 0.1], [0.4, 0.5, 0.45])  # ARM wins on every seed
SPANS = ([0.4, 0.1, 0.45], [0.15, 0.2, 0.17])  # one seed where the ARM wins


def test_every_encoding_above_zero_is_reproduced():
    assert v(real_claim(_real({"rope": ABOVE, "alibi": ABOVE}))) == ("reproduced", None)


def test_an_encoding_below_zero_contradicts():
    c = real_claim(_real({"rope": ABOVE, "learned": BELOW}))
    assert v(c) == ("contradicted", None) and c.holds is False
    assert c.detail.startswith("learned MDM - ARM reverse accuracy (per-token score) [") and c.detail.endswith("below 0")
    assert "rope" not in c.detail
    # a contradicted encoding decides the claim before an underpowered one
    assert v(real_claim(_real({"rope": SPANS, "learned": BELOW}))) == ("contradicted", None)


def test_an_interval_reaching_zero_is_underpowered():
    c = real_claim(_real({"rope": SPANS}))
    iv = paired_diff_ci(*SPANS)
    assert iv.lo < 0 < iv.hi
    assert v(c) == ("inconclusive", "underpowered") and c.holds is False
    assert "rope MDM - ARM reverse accuracy" in c.detail and "spans 0" in c.detail
    assert v(real_claim(_real({"rope": ABOVE, "alibi": SPANS}))) == ("inconclusive", "underpowered")


def test_fewer_seeds_than_the_minimum_is_underpowered_even_when_every_seed_agrees():
    assert MIN_SEEDS == 3
    few = _real({"rope": ([0.4, 0.5], [0.15, 0.2])})
    c = real_claim(few)
    assert v(c) == ("inconclusive", "underpowered") and c.holds is False
    assert f"fewer than the {MIN_SEEDS}" in c.detail
    # even an interval on the other side: too few seeds to judge
    assert v(real_claim(_real({"rope": ([0.1, 0.1], [0.5, 0.6])}))) == ("inconclusive", "underpowered")


def test_models_that_did_not_learn_the_forward_facts_are_a_precondition_failure_whatever_the_interval():
    assert v(real_claim(_real({"rope": ABOVE}, fwd=0.9))) == ("inconclusive", "precondition")  # level 0.91
    c = real_claim(_real({"rope": BELOW}, fwd=0.5))
    assert v(c) == ("inconclusive", "precondition") and "forward accuracy on the training templates (per-token score) 0.500" in c.detail
    assert v(real_claim(_real({"rope": ABOVE}, fwd=0.95))) == ("reproduced", None)


def test_the_gate_and_the_comparison_cannot_reward_length():
    """Issue 34: summed log-likelihood let one short description win every held-out item (forward accuracy exactly
    1 / n_facts).  The gate reads the training templates by per-token score, the comparison the per-token reverse
    accuracy: a length-biased summed score decides neither."""
    real = _real({"rope": ([0.1, 0.1, 0.1], [0.1, 0.1, 0.1])})
    for r in real["runs"]:  # the summed score picks one short candidate everywhere: held-out forward 0.1, and the
        r["forward_acc"] = 0.1  # MDM's summed reverse accuracy looks high; neither is what the claim reads
        if r["kind"] == "mdm":
            r["reverse_acc"] = 0.9
    c = real_claim(real)
    assert v(c) == ("inconclusive", "underpowered") and "per-token" in c.detail  # 0 - 0: no difference
    assert c.evidence["mdm_forward_acc_rope"] == [0.1] * 3  # the held-out summed number: evidence only
    # a model that did not learn the training templates fails the gate whatever its summed numbers say
    for r in real["runs"]:
        r["forward_train_acc_per_token"], r["forward_acc"] = 0.2, 1.0
    assert v(real_claim(real)) == ("inconclusive", "precondition")
