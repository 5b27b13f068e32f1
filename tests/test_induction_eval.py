"""Repeated-token task and the forward/reverse x left/right/both induction evaluation, checked with oracle models."""

import pytest
import torch
from torch import nn

from dlmlab.analysis import induction
from dlmlab.tasks.repeated import RepeatedVocab, mixed_batch, repeated_tokens

V, LO, HI, MASK = 30, 5, 29, 29


class NeighbourOracle(nn.Module):
    """Masked-model oracle: predicts a masked k from its left (side=-1) or right (side=+1) neighbour's copy."""

    def __init__(self, side: int):
        super().__init__()
        self.side = side

    def forward(self, x):
        B, T = x.shape
        out = torch.zeros(B, T, V)
        for b in range(B):
            for k in range(T):
                if x[b, k] != MASK:
                    continue
                n = k + self.side
                if not 0 <= n < T or x[b, n] == MASK:
                    continue
                for j in range(T):
                    if j != n and x[b, j] == x[b, n] and 0 <= j - self.side < T and x[b, j - self.side] != MASK:
                        out[b, k, x[b, j - self.side]] = 10.0
        return out


class BothOracle(nn.Module):
    def __init__(self):
        super().__init__()
        self.l, self.r = NeighbourOracle(-1), NeighbourOracle(+1)

    def forward(self, x):
        return self.l(x) + self.r(x)


class ARInductionOracle(nn.Module):
    """Causal oracle: at position q predicts the token after the previous occurrence of x[q]."""

    def forward(self, x):
        B, T = x.shape
        out = torch.zeros(B, T, V)
        for b in range(B):
            for q in range(T):
                for j in range(q):
                    if x[b, j] == x[b, q]:
                        out[b, q, x[b, j + 1]] = 10.0
        return out


def seqs(B=6, half=10, seed=0):
    return repeated_tokens(B, half, LO, HI, torch.Generator().manual_seed(seed), distinct=True)


def test_repeated_tokens_and_vocab():
    x = repeated_tokens(8, 6, 3, 13, torch.Generator().manual_seed(0))
    assert x.shape == (8, 12) and torch.equal(x[:, :6], x[:, 6:])
    assert x.min() >= 3 and x.max() < 13
    d = repeated_tokens(50, 10, 0, 10, torch.Generator().manual_seed(0), distinct=True)
    assert all(len(set(r[:10].tolist())) == 10 for r in d)
    with pytest.raises(ValueError, match="distinct"):
        repeated_tokens(2, 11, 0, 10, distinct=True)
    v = RepeatedVocab(65, 128)
    assert (v.lo, v.hi, v.mask_id, v.model_vocab) == (65, 193, 193, 194)


def test_mixed_batch_fraction_and_errors():
    text = torch.arange(1000) % 7
    x = mixed_batch(text, 400, 16, 0.25, 100, 120, torch.Generator().manual_seed(0))
    rep = (x >= 100).all(1)
    assert (x[rep][:, :8] == x[rep][:, 8:]).all()
    assert ((x < 7).all(1) | rep).all()
    assert 0.15 < rep.float().mean() < 0.35
    assert torch.equal(x, mixed_batch(text, 400, 16, 0.25, 100, 120, torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError, match="even"):
        mixed_batch(text, 4, 15, 0.5, 100, 120, torch.Generator())
    with pytest.raises(ValueError, match="text_ids is None"):
        mixed_batch(None, 40, 16, 0.5, 100, 120, torch.Generator())


def test_build_rows_contexts_mask_the_right_positions():
    x = seqs(2)
    rows = induction.build_rows(x, MASK, "forward", "left", per_seq=3)
    assert rows.noisy.shape == (6, 20)
    for n in range(6):
        k = int(rows.target[n])
        assert 12 <= k < 18 and int(rows.source[n]) == k - 10
        masked = (rows.noisy[n] == MASK).nonzero().flatten().tolist()
        assert masked == list(range(k, 20))
    rows = induction.build_rows(x, MASK, "reverse", "right", per_seq=3)
    for n in range(6):
        k = int(rows.target[n])
        assert 2 <= k < 8 and int(rows.source[n]) == k + 10
        assert (rows.noisy[n] == MASK).nonzero().flatten().tolist() == list(range(0, k + 1))
    rows = induction.build_rows(x, MASK, "forward", "both", per_seq=3, window=(-2, 2))
    for n in range(6):
        k = int(rows.target[n])
        assert (rows.noisy[n] == MASK).nonzero().flatten().tolist() == [k - 2, k, k + 2]
    with pytest.raises(ValueError, match="not repeated"):
        induction.build_rows(torch.arange(20)[None], MASK, "forward")
    with pytest.raises(ValueError, match="context"):
        induction.build_rows(x, MASK, "forward", "middle")


def test_context_conditions_with_neighbour_oracles():
    x = seqs()
    left, right, both = NeighbourOracle(-1), NeighbourOracle(+1), BothOracle()
    for d in induction.DIRECTIONS:
        tl = {c: induction.dlm_accuracy(left, x, MASK, d, c, per_seq=4) for c in induction.CONTEXTS}
        tr = {c: induction.dlm_accuracy(right, x, MASK, d, c, per_seq=4) for c in induction.CONTEXTS}
        assert tl == {"left": 1.0, "right": 0.0, "both": 1.0}
        assert tr == {"left": 0.0, "right": 1.0, "both": 1.0}
        assert induction.dlm_accuracy(both, x, MASK, d, "both", per_seq=4) == 1.0
    lw = induction.local_window(both, x, MASK, background=0.0, per_seq=4)
    assert lw["none"] == 1.0 and lw["pm1"] == 0.0 and lw["pm2_only"] == 1.0 and lw["pm1_pm2"] == 0.0


def test_ar_accuracy_forward_only():
    x = seqs()
    oracle = ARInductionOracle()
    t = induction.ar_table(oracle, x)
    assert t["forward"]["left"] == 1.0 and t["reverse"]["left"] == 0.0
    assert t["forward"]["both"] is None


def test_embedded_repeats_vary_offset_and_copy_exactly():
    from dlmlab.tasks.repeated import embedded_repeats

    x = embedded_repeats(200, 32, 0, 1000, 8, torch.Generator().manual_seed(0))
    periods = set()
    for r in x.tolist():
        found = [(h, s) for h in range(8, 17) for s in range(0, 33 - 2 * h) if r[s:s + h] == r[s + h:s + 2 * h]]
        assert found
        periods.add(found[0][0])
    assert len(periods) > 5  # the copy offset is not fixed
    full = embedded_repeats(4, 20, 0, 50, 10, torch.Generator().manual_seed(1))
    assert torch.equal(full[:, :10], full[:, 10:])
    with pytest.raises(ValueError, match="min_half"):
        embedded_repeats(2, 20, 0, 50, 11)
