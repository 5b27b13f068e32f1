"""Issue 34: no induction claim passes on an untrained model.

The study's own pipeline (training loop, ``analyse_model``, every claim, the steering run) on models that never
learn: the smoke shapes with a learning rate of 1e-12 (the weights stay at their initialisation; 2 training seeds,
checkpoints for the emergence curve).  (a) as measured, no claim is reproduced (the precondition "the model
learned induction" fails, and says so); (b) with the precondition forged (the headline and folded accuracies
set to 1), the mechanism claims, judged on the untrained models' own mechanism measurements, still are not
reproduced.  ``left_only_not_better_than_ar`` and ``two_layers_needed`` assert an absence (two models at chance
are "not better" than each other; a one-layer model at chance "does not do induction"): their protection is the
precondition itself, which (a) tests.
"""

import copy
import dataclasses
import json

import pytest

from dlmlab.studies.induction import PRESETS, run
from dlmlab.studies.induction.claims import all_claims
from dlmlab.studies.induction.seeds import SEED_REFS

ABSENCE_CLAIMS = {"left_only_not_better_than_ar", "two_layers_needed"}  # protected by the precondition only


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    out = tmp_path_factory.mktemp("untrained")
    p = dataclasses.replace(PRESETS["smoke"], lr=1e-12, steps=20, text_steps=2, warmup_steps=1, ckpt_every=2)
    PRESETS["untrained_test"] = p
    try:
        run("untrained_test", out, progress=False)
    finally:
        del PRESETS["untrained_test"]
    return json.loads((out / "results.json").read_text())


def _forge_learned(models: dict) -> dict:
    """The measurements with every run's headline forward accuracy (and the folded model's) set to 1, and
    layer-0 head 0 declared a previous-token head (so the composition claim reaches its comparison)."""
    models = copy.deepcopy(models)
    for m in models.values():
        for r in [m, *m.get("seed_runs", [])]:
            r["accuracy"]["forward"][r["context"]] = 1.0
            r["fold"]["folded_accuracy"] = 1.0
            r["local_offset_scores"]["-1"][0][0] = 1.0
    return models


@pytest.mark.study
def test_untrained_models_reproduce_no_claim(untrained):
    claims = {c["id"]: c for c in untrained["claims"]}
    assert set(claims) == set(SEED_REFS), "every claim of SEED_REFS has its cannot-pass-untrained test here"
    for cid, c in claims.items():
        assert c["verdict"] != "reproduced", (cid, c["detail"])
        if cid != "mask_rate_steering":  # the others say why: the models did not learn induction
            assert c["reason"] == "precondition" and "learned level" in c["detail"], (cid, c["detail"])
    m = untrained["results"]["models"]["dlm_L2"]
    assert len(m["seed_runs"]) == 1 and len(m["emergence"]["curve"]) == 10  # 2 seeds; the checkpoint curve


@pytest.mark.study
def test_untrained_mechanisms_fail_even_with_the_precondition_forged(untrained):
    forged = {c.id: c for c in all_claims(_forge_learned(untrained["results"]["models"]))}
    judged = set(SEED_REFS) - ABSENCE_CLAIMS - {"mask_rate_steering"}  # steering: judged in the run (test above)
    assert judged <= set(forged)
    for cid in sorted(judged):
        c = forged[cid]
        assert c.verdict != "reproduced", (cid, c.detail, c.evidence)
        assert "learned level" not in c.detail, (cid, c.detail)  # judged on the mechanism, not the precondition
        assert c.reason != "precondition", (cid, c.detail)
