"""Orders, count schedules and the adaptive (threshold / factor) rules on hand-made logits; per-row progress."""

import math

import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.sampling import DecodeConfig, decode, linear_schedule, unmask_schedule
from dlmlab.sampling.orders import order_scores
from dlmlab.sampling.schedules import ancestral_count, factor_count, threshold_count

V = 5  # four real tokens and the mask (id 4)
MASK = 4


class Fixed(torch.nn.Module):
    """A plain bidirectional ``tokens -> logits`` stand-in returning hand-made probabilities: row r (its first
    token is r) at position i gets ``probs[r][i]`` whatever the other tokens are (decoded with mask_id=MASK)."""

    def __init__(self, probs: list[list[list[float]]]) -> None:
        super().__init__()
        p = torch.tensor(probs, dtype=torch.float64)
        self.table = torch.cat([p, torch.zeros(p.shape[:-1] + (1,), dtype=torch.float64)], -1).clamp(min=1e-30).log()
        self.calls = []

    def forward(self, tokens):
        self.calls.append(tokens.shape[0])
        T = tokens.shape[1]
        return self.table[tokens[:, 0]][:, :T]


# one prompt token (the row id) then three positions with known top-1 / margin / entropy
A = [0.5, 0.5, 0.0, 0.0]  # top1 .5, margin 0, entropy .69
Bp = [0.6, 0.2, 0.1, 0.1]  # top1 .6, margin .4, entropy 1.09
C = [0.4, 0.2, 0.2, 0.2]  # top1 .4, margin .2, entropy 1.33
PAD = [1.0, 0.0, 0.0, 0.0]


def commit_order(model, cfg, rows=1, seed=0):
    canvas = torch.tensor([[r] + [MASK] * 3 for r in range(rows)])
    res = decode(model, canvas, 1, cfg, torch.Generator().manual_seed(seed), mask_id=MASK, record=True)
    order = [rec.committed[0].nonzero().squeeze(1).tolist() for rec in res.trajectory]
    return res, order


@pytest.mark.parametrize("order,expected", [("confidence", [[2], [1], [3]]), ("margin", [[2], [3], [1]]),
                                            ("entropy", [[1], [2], [3]])])
def test_each_order_commits_in_its_own_sequence(order, expected):
    m = Fixed([[PAD, A, Bp, C]])
    _, got = commit_order(m, DecodeConfig(steps=3, order=order, temperature=0.0, kv_reuse="none"))
    assert got == expected


def test_order_scores_by_hand():
    logp = torch.tensor([A, Bp, C], dtype=torch.float64).clamp(min=1e-300).log()
    tok = torch.tensor([0, 0, 0])
    torch.testing.assert_close(order_scores("confidence", logp, tok), torch.tensor([0.5, 0.6, 0.4], dtype=torch.float64))
    torch.testing.assert_close(order_scores("margin", logp, tok), torch.tensor([0.0, 0.4, 0.2], dtype=torch.float64))
    ent = [-(sum(p * math.log(p) for p in row if p > 0)) for row in (A, Bp, C)]
    torch.testing.assert_close(order_scores("entropy", logp, tok), -torch.tensor(ent, dtype=torch.float64))


def test_random_order_is_seeded_and_varies():
    m = Fixed([[PAD, A, Bp, C]])
    cfg = DecodeConfig(steps=3, order="random", temperature=0.0, kv_reuse="none")
    orders = {tuple(map(tuple, commit_order(m, cfg, seed=s)[1])) for s in range(12)}
    assert len(orders) > 1
    assert commit_order(m, cfg, seed=3)[1] == commit_order(m, cfg, seed=3)[1]
    assert all(sorted(sum(map(list, o), [])) == [1, 2, 3] for o in orders)


def test_schedules():
    assert sum(linear_schedule(10, 4)) == 10 and max(linear_schedule(10, 4)) - min(linear_schedule(10, 4)) <= 1
    assert linear_schedule(12, 4) == [3, 3, 3, 3]


def test_linear_schedule_is_llada_get_num_transfer_tokens():
    # LLaDA's generate.py: total // steps each, the remainder one each to the first steps (issue 37)
    assert linear_schedule(8, 3) == [3, 3, 2]
    for total in range(1, 40):
        for steps in range(1, total + 1):
            base, extra = divmod(total, steps)
            assert linear_schedule(total, steps) == [base + (s < extra) for s in range(steps)]
    assert linear_schedule(3, 5) == [1, 1, 1]  # LLaDA's [1, 1, 1, 0, 0] without the steps that commit nothing
    assert unmask_schedule(3, 8) == [1, 1, 1]
    g = torch.Generator().manual_seed(0)
    n = torch.tensor([5, 0, 3])
    assert ancestral_count(n, 3, 4, g).tolist() == [5, 0, 3]  # the last step reveals everything
    draws = torch.stack([ancestral_count(torch.tensor([1000]), 0, 4, g) for _ in range(5)])
    assert (draws - 250).abs().max() < 60  # Binomial(1000, 1/4)


def test_threshold_rule_by_hand():
    s = torch.tensor([[0.95, 0.9, 0.5, 0.3], [0.4, 0.3, float("-inf"), float("-inf")]], dtype=torch.float64)
    assert threshold_count(s, 0.8).tolist() == [2, 1]  # at least one per step
    assert factor_count(s, 1.0).tolist() == [2, 1]  # 3*(1-.9)=.3 < 1, 4*(1-.5)=2 >= 1
    assert factor_count(torch.tensor([[0.95, 0.9, 0.8, 0.3]], dtype=torch.float64), 1.0).tolist() == [3]


def test_threshold_decoding_rows_progress_independently():
    sure, unsure = [0.95, 0.05, 0.0, 0.0], [0.5, 0.3, 0.2, 0.0]
    m = Fixed([[PAD, sure, sure, sure], [PAD, unsure, sure, unsure]])
    res, _ = commit_order(m, DecodeConfig(order="confidence", threshold=0.9, temperature=0.0, kv_reuse="none"), rows=2)
    steps = [rec.committed.sum(1).tolist() for rec in res.trajectory]
    assert steps == [[3, 1], [0, 1], [0, 1]]  # row 0 commits everything at once, row 1 one by one
    assert m.calls == [2, 1, 1]  # the finished row drops out of later forwards
    assert not (res.tokens == MASK).any()


def test_ancestral_schedule_reuses_unchanged_outputs():
    m = Fixed([[PAD, A, Bp, C]])
    res, _ = commit_order(m, DecodeConfig(steps=40, unmask_rule="ancestral", order="random", kv_reuse="none"))
    assert res.steps <= 40
    assert res.forwards < res.steps  # steps that revealed nothing did not run the model again
    assert not (res.tokens == MASK).any()


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="threshold"):
        DecodeConfig(threshold=1.5)
    with pytest.raises(ConfigError, match="order"):
        DecodeConfig(order="entropy", threshold=0.9)
    with pytest.raises(ConfigError, match="block_len"):
        DecodeConfig(block_len=-1)
    with pytest.raises(ConfigError, match="kv_reuse"):
        DecodeConfig(kv_reuse="magic")
