"""PreDiff protocol on small hand-made inputs: prompt fraction, both training losses, the study code's
evaluation weighting, the paired t-interval over seed means and the paired claims."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from dlmlab.config import ConfigError
from dlmlab.objectives import step_batch
from dlmlab.prediff import METHODS, diffusion_loss, eval_original_weighting, make_task, prompt_length
from dlmlab.prediff.objectives import COSINE_T_RANGE, cosine_mask_rates
from dlmlab.studies.prediff.claims import compute_claims
from dlmlab.studies.prediff.paired import lower_is_better, seed_mean_t_interval
from dlmlab.studies.prediff.presets import PreDiffPreset


class FixedLogits(nn.Module):
    """A stand-in denoiser: logits [B,T,V] given by a fixed table per vocabulary id (ignores context)."""

    def __init__(self, V: int, table: torch.Tensor | None = None) -> None:
        super().__init__()
        self.mask_id = V - 1
        self.table = table if table is not None else torch.zeros(V)
        self.uses_self_cond = False

    def forward(self, tokens, time=None, **kw):
        B, T = tokens.shape
        return self.table.expand(B, T, -1).clone()


def test_prompt_is_a_fixed_fraction_of_each_window():
    assert prompt_length(0.5, 64) == 32 and prompt_length(0.5, 512) == 256
    assert prompt_length(0.01, 8) == 1 and prompt_length(0.99, 8) == 7  # always a prompt and a target
    with pytest.raises(ConfigError):
        prompt_length(1.0, 8)
    stream = torch.randint(0, 50, (2000,))
    make_batch, obj = make_task(METHODS["prediff"], stream, seq_len=16, batch=6, steps=10, prompt_frac=0.5)
    g = torch.Generator().manual_seed(0)
    b = step_batch(obj, make_batch(0, g), g, 0)
    assert b["prompt_len"].tolist() == [8] * 6
    assert PreDiffPreset().prompt_len == 32
    with pytest.raises(ConfigError, match="prompt_frac"):
        PreDiffPreset(prompt_frac=0.0).validate()
    with pytest.raises(ConfigError, match="loss"):
        PreDiffPreset(loss="elbo").validate()


def test_cosine_mask_rates_follow_the_study_schedule():
    t = cosine_mask_rates(10000, torch.Generator().manual_seed(0))
    lo, hi = COSINE_T_RANGE
    assert float(t.min()) == pytest.approx(lo) and float(t.max()) == pytest.approx(hi)  # float32 clip
    # t = cos(pi u / 2): P(t <= x) = 1 - (2/pi) arccos(x)
    for x in (0.2, 0.5, 0.9):
        assert abs(float((t <= x).float().mean()) - (1 - 2 / math.pi * math.acos(x))) < 0.01
    stream = torch.randint(0, 50, (2000,))
    task_ce = make_task(METHODS["prediff"], stream, 16, 4, 10, loss="masked_ce")
    task_b = make_task(METHODS["prediff"], stream, 16, 4, 10, loss="mdlm_bound")

    def draw(task, i):
        g = torch.Generator().manual_seed(i)
        return step_batch(task[1], task[0](i, g), g, i)

    t_ce = torch.cat([draw(task_ce, i)["t"] for i in range(200)])
    assert float(t_ce.min()) >= lo - 1e-6 and float((t_ce > 0.5).float().mean()) > 0.6  # cosine: mostly high rates
    assert float(draw(task_b, 1)["t"].min()) >= 1e-3


def test_both_training_losses_on_hand_made_logits():
    V = 6
    table = torch.tensor([2.0, 0.0, 1.0, 0.0, -1.0, 0.0])  # the last id is the mask
    model = FixedLogits(V, table)
    tokens = torch.tensor([[0, 1, 2, 3], [4, 0, 1, 2]])
    P = torch.tensor([1, 2])
    t = torch.tensor([0.5, 0.25])
    noise = torch.tensor([[0.0, 0.1, 0.9, 0.2], [0.0, 0.0, 0.1, 0.6]])  # masked where noise < t and not prompt
    logp = torch.log_softmax(table[:-1], 0)
    masked = {(0, 1), (0, 3), (1, 2)}
    ce = [-float(logp[tokens[b, i]]) for b, i in sorted(masked)]
    loss_ce, met = diffusion_loss(model, tokens, P, t, noise, loss="masked_ce")
    assert loss_ce.item() == pytest.approx(sum(ce) / 3)
    row0 = (ce[0] + ce[1]) / 0.5 / 3  # (1/t) * masked NLL / n_target (3 target tokens)
    row1 = ce[2] / 0.25 / 2
    loss_b, _ = diffusion_loss(model, tokens, P, t, noise, loss="mdlm_bound")
    assert loss_b.item() == pytest.approx((row0 + row1) / 2)
    assert met["nelbo"] == pytest.approx(loss_b.item()) and met["masked_ce"] == pytest.approx(loss_ce.item())


def test_mdlm_bound_under_a_cosine_noise_schedule_on_hand_made_logits():
    from dlmlab.objectives import CosineSchedule, LinearSchedule

    V = 6
    table = torch.tensor([2.0, 0.0, 1.0, 0.0, -1.0, 0.0])
    model = FixedLogits(V, table)
    tokens = torch.tensor([[0, 1, 2, 3], [4, 0, 1, 2]])
    P = torch.tensor([1, 2])
    t = torch.tensor([0.5, 0.25])
    noise = torch.tensor([[0.0, 0.1, 0.9, 0.2], [0.0, 0.0, 0.1, 0.6]])
    s = CosineSchedule(eps=0.1)
    logp = torch.log_softmax(table[:-1], 0).tolist()
    rows = []
    for b in range(2):
        tb = float(t[b])
        mp = (1 - 0.1) * (1 - math.cos(math.pi * tb / 2))  # masked where noise < mask_prob(t), after the prompt
        w = (math.pi / 2) * math.sin(math.pi * tb / 2) / (1 - math.cos(math.pi * tb / 2))
        nll = sum(-logp[int(tokens[b, i])] for i in range(int(P[b]), 4) if float(noise[b, i]) < mp)
        rows.append(w * nll / (4 - int(P[b])))
    loss, _ = diffusion_loss(model, tokens, P, t, noise, loss="mdlm_bound", schedule=s)
    assert loss.item() == pytest.approx(sum(rows) / 2, rel=1e-6)
    default, _ = diffusion_loss(model, tokens, P, t, noise, loss="mdlm_bound")
    assert torch.equal(default, diffusion_loss(model, tokens, P, t, noise, loss="mdlm_bound",
                                               schedule=LinearSchedule())[0])


def test_original_weighting_is_the_midpoint_rule_with_one_over_one_minus_t():
    V = 9
    model = FixedLogits(V)  # uniform over the 8 non-mask ids: CE = log 8 at every masked token
    windows = torch.randint(0, V - 1, (5, 12))
    n_t = 4
    expect = math.log(V - 1) * sum(1 / (1 - (k + 0.5) / n_t) for k in range(n_t)) / n_t
    assert eval_original_weighting(model, windows, prompt_len=6, n_t=n_t) == pytest.approx(expect)


def test_seed_mean_t_interval_on_small_inputs():
    d = np.array([[-1.0, -1.2, -0.8], [-0.9, -1.1, -1.0], [-1.05, -0.95, -1.0]])
    c = lower_is_better(d, np.zeros_like(d))
    assert c["holds"] and c["hi"] < 0 and c["lo"] <= c["mean"] <= c["hi"]
    assert c["per_seed"] == pytest.approx([-1.0, -1.0, -1.0])
    mixed = np.array([[-1.0, 0.8], [1.0, -0.6], [0.5, -0.6]])  # seed means -0.1, 0.2, -0.05
    c = lower_is_better(mixed, np.zeros_like(mixed))
    assert not c["holds"] and c["lo"] < 0 < c["hi"]
    assert seed_mean_t_interval(mixed) == seed_mean_t_interval(mixed)  # deterministic
    assert (c["n"], c["unit"], c["method"]) == (3, "seeds", "t")
    # one seed far off: the t-interval over seed means carries it into the interval
    seeds_disagree = np.array([[-1.0] * 50, [-1.0] * 50, [2.5] * 50])
    assert not lower_is_better(seeds_disagree, np.zeros((3, 50)))["holds"]
    with pytest.raises(ValueError):
        lower_is_better(np.zeros((2, 3)), np.zeros((3, 2)))


def _comparison(a: str, b: str, holds: bool) -> dict:
    lo, hi = (-0.3, -0.1) if holds else (-0.1, 0.1)
    return {"a": a, "b": b, "mean": (lo + hi) / 2, "lo": lo, "hi": hi, "per_seed": [lo, hi, lo], "n_seeds": 3,
            "n_windows": 8, "holds": holds}


def test_paired_claims_follow_the_intervals():
    names = {"hybrid_vs_uniform_bidir": ("prediff", "uniform_bidir"),
             "combined_vs_attention_only": ("attn_obj", "prediff"),
             "combined_vs_objective_only": ("attn_obj", "diffugpt"),
             "ar_control_vs_best_diffusion": ("ar_control", "attn_obj"),
             "ar_init_vs_scratch_steps": ("prediff", "scratch")}
    res = {"comparisons": {k: _comparison(a, b, True) for k, (a, b) in names.items()}, "speed": {}}
    c = {x.id: x for x in compute_claims(res)}
    for cid in ("hybrid_beats_uniform_bidirectional", "attention_and_objective_compose",
                "ar_init_reaches_threshold_faster_than_scratch", "ar_control_still_better"):
        assert c[cid].holds is True, cid
    assert c["hybrid_beats_uniform_bidirectional"].evidence["prediff_vs_uniform_bidir"]["interval_95"] == [-0.3, -0.1]
    # attn_obj vs diffugpt counts in the compose claim only (issue 34: one comparison, one claim)
    res["comparisons"]["combined_vs_objective_only"] = _comparison("attn_obj", "diffugpt", False)
    c = {x.id: x for x in compute_claims(res)}
    assert c["hybrid_beats_uniform_bidirectional"].holds is True
    assert c["attention_and_objective_compose"].holds is False
    c = {x.id: x for x in compute_claims({"comparisons": {}, "speed": {}})}
    assert all(x.holds is None for x in c.values())


def test_human_preference_reads_the_ratings_of_the_run(tmp_path):
    from dlmlab.rating.samples import Pair, Sample
    from dlmlab.rating.store import RatingStore
    from dlmlab.studies.prediff.preference import human_preference, preference_table

    assert human_preference(tmp_path) is None  # no ratings yet: nothing in the report
    store = RatingStore(tmp_path / "ratings.sqlite")
    for i, choice in enumerate(["left", "left", "right", "tie"]):
        a = Sample(f"p{i}", "ar_control", "x", 1)
        b = Sample(f"p{i}", "prediff@32", "y", 2)
        store.record(Pair(a, b), b, a, choice)  # prediff shown on the left
    pref = human_preference(tmp_path)
    (row,) = pref["pairs"]
    assert (row["a"], row["b"]) == ("prediff@32", "ar_control")  # PreDiff first, as the study reports it
    assert (row["a_wins"], row["ties"], row["b_wins"]) == (2, 1, 1) and row["a_win_rate"] == pytest.approx(0.625)
    assert preference_table(pref).rows[0][:5] == ["prediff@32", "ar_control", 2, 1, 1]
