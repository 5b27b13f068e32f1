"""The ``dlmlab`` Monte Carlo ELBO estimator (dlmlab.lmeval.estimators / control) on a tiny random masked-diffusion
Transformer in float64: its mean is the exact NELBO computed by enumerating every mask subset, it agrees with
LLaDA's estimator (the same quantity) within their combined standard errors, and the control variate's
expectations are exact."""

import itertools
import math

import pytest
import torch

from dlmlab.lmeval import control
from dlmlab.lmeval import estimators as E
from dlmlab.lmeval.scoring import DiffusionScorer
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives.mdlm import log_probs_no_mask
from dlmlab.sampling import as_denoiser

V = 9
MASK = V - 1


@pytest.fixture(scope="module")
def den():
    torch.manual_seed(0)
    m = Transformer(TransformerConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, d_mlp=32, max_seq_len=24,
                                      attn_mask="bidirectional", positions="rope", init_std=0.5)).double().eval()
    return as_denoiser(m, MASK)


def _request(L, seed=1, prompt=4):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V - 1, (prompt + L,), generator=g).tolist()
    return ids[:prompt], ids[prompt:]


@torch.no_grad()
def _exact_nelbo(den, ctx, cont) -> float:
    """sum_M [sum_{i in M} CE_i(M)] / (|M| C(L, |M|)) over every non-empty subset M, by direct forwards."""
    L, total = len(cont), 0.0
    tgt = torch.tensor(cont)
    for l in range(1, L + 1):
        for M in itertools.combinations(range(L), l):
            x = torch.tensor(ctx + cont)[None].clone()
            x[0, [len(ctx) + i for i in M]] = MASK
            lp = log_probs_no_mask(den(x, clean_len=len(ctx), t=torch.ones(1))[:, len(ctx):], MASK)[0]
            total += float(-lp[list(M), tgt[list(M)]].sum()) / (l * math.comb(L, l))
    return total


@torch.no_grad()
def _draws(den, req, method, mc_num, seeds, batch=32):
    """(estimates, standard errors) [len(seeds)]: the scorer's plans and combination, one batched forward."""
    ctx, cont = req
    sc = DiffusionScorer(den, MASK, method, mc_num, batch_size=64, seed=0, llada_batch=batch)
    plans = []
    for seed in seeds:
        sc.seed = seed
        plans.append(sc.plans([req])[0])
    masks = torch.cat(plans)
    x = torch.tensor(ctx + cont).repeat(len(masks), 1)
    x[:, len(ctx):][masks] = MASK
    lp = log_probs_no_mask(den(x, clean_len=len(ctx), t=torch.ones(len(x)))[:, len(ctx):], MASK)
    ce = -lp.gather(-1, torch.tensor(cont).expand(len(x), -1)[..., None])[..., 0]
    vals, ses, r = [], [], 0
    for m in plans:
        v, s = E.combine(method, m, ce[r:r + len(m)])
        vals.append(v)
        ses.append(s)
        r += len(m)
    return torch.tensor(vals, dtype=torch.float64), torch.tensor(ses, dtype=torch.float64)


def test_mean_is_the_exact_nelbo_by_enumeration(den):
    """L = 4 (15 subsets) with mc_num = 8: the Monte Carlo path (fully masked row + 7 controlled rows)."""
    ctx, cont = _request(4)
    exact = _exact_nelbo(den, ctx, cont)
    sc = DiffusionScorer(den, MASK, "dlmlab", 15, batch_size=64, seed=0)
    assert sc.score([(ctx, cont)])[0][0] == pytest.approx(exact, abs=1e-10)  # the enumeration path
    vals, ses = _draws(den, (ctx, cont), "dlmlab", 8, range(250))
    err = vals.std() / math.sqrt(len(vals))
    assert abs(float(vals.mean()) - exact) < 4 * float(err), (float(vals.mean()), exact, float(err))
    assert 0.6 * vals.std() < ses.mean() < 2.0 * vals.std()  # the reported standard error is honest


def test_agrees_with_llada_and_the_exact_nelbo_on_a_longer_continuation(den):
    """L = 9 (511 subsets enumerated for the exact value); both estimators at 16 forwards."""
    ctx, cont = _request(9, seed=2)
    exact = _exact_nelbo(den, ctx, cont)
    ours, _ = _draws(den, (ctx, cont), "dlmlab", 16, range(120))
    llada, _ = _draws(den, (ctx, cont), "llada", 16, range(120), batch=16)
    se_o, se_l = ours.std() / math.sqrt(len(ours)), llada.std() / math.sqrt(len(llada))
    assert abs(float(ours.mean() - llada.mean())) < 4 * float((se_o ** 2 + se_l ** 2).sqrt())
    assert abs(float(ours.mean()) - exact) < 4 * float(se_o)
    assert abs(float(llada.mean()) - exact) < 4 * float(se_l)


def test_plan_rows():
    g = torch.Generator().manual_seed(0)
    masks = E.plan("dlmlab", 12, 20, g)
    assert masks.shape == (20, 12) and bool(masks[0].all())                  # the fully masked row first
    counts = masks[1:].sum(1)
    assert int(counts.min()) >= 1 and int(counts.max()) <= 11                 # the rest stratified over 1..L-1
    assert torch.equal(counts, E.stratified_counts(11, 19, torch.Generator().manual_seed(0)))
    assert E.plan("dlmlab", 12, 1, g).shape == (1, 12)                        # mc_num = 1: one uniform row
    assert E.plan("dlmlab", 3, 7, g).shape == (7, 3)                          # 2^3 - 1 = 7: enumeration


def test_control_variate_expectations_are_exact():
    """E[features_i(M) | i in M, |M| = l] over every l-subset containing i equals ``features``' expectation."""
    L = 6
    c = torch.linspace(0.5, 2.0, L, dtype=torch.float64)
    for l in range(1, L + 1):
        subsets = [M for M in itertools.combinations(range(L), l)]
        masks = torch.zeros(len(subsets), L, dtype=torch.bool)
        for r, M in enumerate(subsets):
            masks[r, list(M)] = True
        shared, eshared, local, elocal = control.features(masks, c)
        for x, ex in ((shared, eshared), (local, elocal)):
            for i in range(L):
                rows = masks[:, i]
                assert torch.allclose(x[rows, i].mean(0), ex[rows, i][0], atol=1e-12), (l, i)
                assert torch.allclose(ex[rows, i], ex[rows, i][:1].expand_as(ex[rows, i]))  # depends on l only
