"""No PreDiff claim can pass on models that never learned (issue 34).

The whole study pipeline (``run``: backbone, six methods x two seeds, held-out bounds, threshold, sampling,
interleaved timing, claims) runs on a tiny GPT-2-shaped backbone trained for one step at a negligible learning
rate and adapted for two: a random model in all but name.  Every claim the study states (each id of
``SEED_REFS``) is judged on those real measurements and must not come out reproduced; the speed claim is
timed over three interleaved rounds so that its interval, and not a missing measurement, is what is judged.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from dlmlab.models import TransformerConfig
from dlmlab.studies.prediff import PRESETS, run
from dlmlab.studies.prediff.seeds import SEED_REFS
from dlmlab.training import TrainConfig

pytestmark = pytest.mark.study  # the whole pipeline: about 2 minutes' wall time on the loaded 2-core machine


def untrained_preset():
    """The smoke recipe with a d16 backbone that takes one pretraining step at lr 1e-6 and two adaptation steps."""
    smoke = PRESETS["smoke"]
    tiny = dict(steps=2, batch_size=4, warmup_steps=0, log_every=1, keep_checkpoints=1, progress=False)
    return dataclasses.replace(
        smoke, model=TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_mlp=64, mlp="gelu_new", max_seq_len=48),
        pretrain=TrainConfig(**{**tiny, "steps": 1}, lr=1e-6), adapt=TrainConfig(**tiny, lr=1e-6), scratch_lr=1e-6,
        curve_every=1, curve_windows=4, eval_windows=8, n_prompts=4, gen_len=8, sample_steps=[8], speed_repeats=3,
        lambada_limit=2)


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    out = tmp_path_factory.mktemp("prediff-untrained")
    PRESETS["untrained"] = untrained_preset()
    try:
        run("untrained", out, progress=False)
    finally:
        del PRESETS["untrained"]
    return json.loads((out / "results.json").read_text())


def test_every_claim_of_the_study_is_covered(untrained):
    # a claim added to SEED_REFS without coming out of the run would escape this module's test
    assert {c["id"] for c in untrained["claims"]} == set(SEED_REFS)


@pytest.mark.parametrize("cid", sorted(SEED_REFS))
def test_an_untrained_model_cannot_reproduce(untrained, cid):
    c = next(x for x in untrained["claims"] if x["id"] == cid)
    assert c["verdict"] != "reproduced", (cid, c["detail"])
    # not by luck of a missing measurement: every claim was measured and failed its learned precondition, which
    # quotes the context-free level the models did not get below
    assert c["reason"] == "precondition" and "context-free" in c["detail"], (cid, c["reason"], c["detail"])
    assert c["evidence"]["learned"]["holds"] is False


def test_the_untrained_models_sit_at_the_context_free_level(untrained):
    r = untrained["results"]
    unigram = r["data"]["unigram_nll"]
    for name, m in r["methods"].items():
        assert min(m["val_nll_per_seed"]) > unigram - 0.05, name  # none uses context
    assert len(r["speed"]["prediff@8"]["times_s"]) == 3 and r["speed"]["prediff@8"]["interleaved"]
