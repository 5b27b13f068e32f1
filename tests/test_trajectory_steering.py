"""The implicit timestep during real sampling (issue 29, part 4): the mask-rate reader along decoding trajectories,
steering along it against >= 200 random directions of the same norm, the claim's permutation test, table, figure."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlmlab.errors import UserError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.report.claims import Claim
from dlmlab.report.results import Table
from dlmlab.studies.induction.steering import (MIN_RANDOM, SteeringResult, fit_reader, reader_from_direction,
                                               run_steering, steering_claim, steering_figure, steering_tables)

V, MASK, T = 20, 19, 12


def _model():
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, d_mlp=0, max_seq_len=T,
                                         attn_mask="bidirectional")).eval()


def _tokens(n=12):
    return torch.randint(0, MASK, (n, T), generator=torch.Generator().manual_seed(0))


def test_reader_predicts_in_raw_space_and_a_given_direction_is_calibrated():
    m = _model()
    r = fit_reader(m, _tokens(16), MASK, t_range=(0.1, 0.9))
    assert r.w.shape == (16,) and np.isfinite(r.r2)
    g = reader_from_direction(m, _tokens(16), MASK, r.direction.numpy(), t_range=(0.1, 0.9))
    torch.testing.assert_close(g.direction.abs(), r.direction.abs(), atol=1e-6, rtol=1e-6)
    x = torch.randn(3, 16, dtype=torch.float64)
    torch.testing.assert_close(g.predict(x), x @ g.w + g.b)


def test_run_steering_end_to_end(tmp_path, capsys):
    res = run_steering(_model(), MASK, _tokens(), t_range=(0.1, 0.5), n_random=MIN_RANDOM, n_prompts=3, seed=0)
    err = capsys.readouterr().err  # a progress bar over its 3 + n_random decodes, on by default
    assert "steering decodes" in err and f"{3 + MIN_RANDOM}/{3 + MIN_RANDOM}" in err
    assert len(res.random) == MIN_RANDOM and res.prompt_len == T - 6
    S = len(res.actual)
    assert S >= 1 and len(res.predicted) == S and res.actual[0] == [0.5] * 3  # decoding starts at t_max
    for d in (res.base, res.add, res.remove):
        assert set(d) == {"entropy", "tokens_per_step", "steps"} and d["tokens_per_step"] >= 1
    c = steering_claim(res)
    assert isinstance(c, Claim) and c.id == "mask_rate_steering" and c.evidence["n_random"] == MIN_RANDOM
    tables = steering_tables(res)
    assert all(isinstance(t, Table) for t in tables) and [r[0] for r in tables[1].rows] == ["entropy",
                                                                                          "tokens_per_step"]
    fig = steering_figure(res, tmp_path)
    assert (tmp_path / fig["path"]).exists() and fig["caption"]
    with pytest.raises(UserError, match="n_random"):
        run_steering(_model(), MASK, _tokens(), n_random=50)


def _synthetic(add_e, rem_e, add_t, rem_t, n=MIN_RANDOM):
    rng = np.random.default_rng(0)
    base = {"entropy": 1.0, "tokens_per_step": 2.0, "steps": 10}
    rand = [{"entropy": 1.0 + e, "tokens_per_step": 2.0 + t, "steps": 10}
            for e, t in zip(rng.normal(0, 0.01, n), rng.normal(0, 0.01, n))]
    return SteeringResult("blocks.0.resid_post", 0.9, 1.0, 0.9, 4, 8, [[0.5]], [[0.5]], 0.9, 0.99, base,
                          {"entropy": 1.0 + add_e, "tokens_per_step": 2.0 + add_t, "steps": 10},
                          {"entropy": 1.0 + rem_e, "tokens_per_step": 2.0 + rem_t, "steps": 10}, rand)


def test_claim_verdicts_follow_the_permutation_test():
    assert steering_claim(_synthetic(0.1, -0.1, -0.1, 0.1)).verdict == "reproduced"
    res = _synthetic(0.1, -0.1, -0.1, 0.1)
    assert res.p_value("entropy", "add", +1) == pytest.approx(1 / (MIN_RANDOM + 1))
    assert res.p_value("entropy", "add", -1) == pytest.approx(1.0)
    again = SteeringResult.from_dict(res.to_dict())
    assert again.p_value("entropy", "add", +1) == res.p_value("entropy", "add", +1)
    wrong = steering_claim(_synthetic(-0.1, -0.1, -0.1, 0.1))  # adding lowers entropy beyond every random one
    assert wrong.verdict == "contradicted" and "add: entropy" in wrong.detail
    weak = steering_claim(_synthetic(0.012, -0.1, -0.1, 0.1))  # above most random directions, not significantly
    assert 0.05 < weak.evidence["p_add_entropy"] <= 0.5
    assert weak.verdict == "inconclusive" and weak.reason == "underpowered"
    unmoved = steering_claim(_synthetic(0.1, -0.1, 0.05, 0.1))  # tokens/step up: no better than the random median
    assert unmoved.verdict == "contradicted" and "add: tokens/step" in unmoved.detail
