"""Noise schedules: the default is the historical linear schedule bit for bit; every schedule's ELBO weight is
-alpha'/(1-alpha) (float64 finite differences); the schedule-weighted MDLM loss equals a plain float64 loop;
samplers' reveal rules agree with the schedules."""

import math

import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.errors import UserError
from dlmlab.objectives import (SCHEDULES, CosineSchedule, LinearSchedule, LogLinearSchedule, get_schedule, mdlm_loss)
from dlmlab.objectives import schedule as sched_mod
from dlmlab.objectives.mdlm import log_probs_no_mask
from dlmlab.sampling import linear_schedule, unmask_schedule
from dlmlab.sampling.schedules import ancestral_count

V = 11
MASK = V - 1
ALL = [LinearSchedule(), LinearSchedule(eps=0.05), LogLinearSchedule(), LogLinearSchedule(eps=0.1, t_lo=0.02),
       CosineSchedule(), CosineSchedule(eps=0.0), CosineSchedule(eps=0.2, t_lo=0.05)]


# --- the historical linear schedule, kept here verbatim as the reference -----------------------------
def old_mask_prob(t):
    return 1.0 - (1.0 - t)


def old_sample_t(batch, generator, eps=1e-3, antithetic=True):
    u = torch.rand(1 if antithetic else batch, generator=generator)
    if antithetic:
        u = (u + torch.arange(batch) / batch) % 1.0
    return eps + (1.0 - eps) * u


def old_mdlm_loss(model, tokens, mask_id, generator, eps=1e-3):
    B, T = tokens.shape
    t = old_sample_t(B, generator, eps=eps)
    u = torch.rand(tokens.shape, generator=generator)
    masked = u < old_mask_prob(t)[:, None]
    noisy = torch.where(masked, torch.full_like(tokens, mask_id), tokens)
    logp = log_probs_no_mask(model(noisy), mask_id)
    nll = -logp.gather(-1, tokens[..., None]).squeeze(-1) * masked
    return ((1.0 / t) * nll.sum(1) / torch.full((B,), T)).mean()


class FixedLogits(torch.nn.Module):
    def __init__(self, B, T, dtype=torch.float32, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.logits = torch.nn.Parameter(torch.randn(B, T, V, generator=g).to(dtype))

    def forward(self, x, **kw):
        return self.logits


def data(B=6, T=9, seed=0):
    return torch.randint(0, V - 1, (B, T), generator=torch.Generator().manual_seed(seed))


def test_default_is_the_historical_linear_schedule_bit_for_bit():
    t = torch.rand(1000, generator=torch.Generator().manual_seed(0)) * 0.999 + 1e-3
    for s in (LinearSchedule(), get_schedule(), get_schedule("linear")):
        assert torch.equal(s.mask_prob(t), old_mask_prob(t))
        assert torch.equal(s.elbo_weight(t), 1.0 / t)
        assert torch.equal(s.alpha(t), 1.0 - t)
    assert torch.equal(sched_mod.mask_prob(t), old_mask_prob(t)) and torch.equal(sched_mod.elbo_weight(t), 1.0 / t)
    for B in (1, 7, 16):
        for eps in (1e-3, 0.0, 0.05):
            for anti in (True, False):
                ref = old_sample_t(B, torch.Generator().manual_seed(B), eps, anti)
                assert torch.equal(LinearSchedule(eps=eps).sample_t(B, torch.Generator().manual_seed(B), anti), ref)
    assert not hasattr(sched_mod, "sample_t")  # times are drawn through a schedule class only


def test_default_mdlm_loss_is_bit_identical_to_the_old_formula():
    x = data()
    model = FixedLogits(6, 9)
    for seed in range(4):
        ref = old_mdlm_loss(model, x, MASK, torch.Generator().manual_seed(seed))
        got, _ = mdlm_loss(model, x, MASK, generator=torch.Generator().manual_seed(seed))
        same, _ = mdlm_loss(model, x, MASK, generator=torch.Generator().manual_seed(seed), schedule=LinearSchedule())
        assert torch.equal(got, ref) and torch.equal(same, ref)
    ref = old_mdlm_loss(model, x, MASK, torch.Generator().manual_seed(0), eps=0.05)
    assert torch.equal(mdlm_loss(model, x, MASK, generator=torch.Generator().manual_seed(0), eps=0.05)[0], ref)


def test_sampler_rules_of_the_linear_schedule_are_the_historical_ones():
    lin = LinearSchedule()
    for S in range(1, 40):
        for j in range(S):
            assert lin.reveal_prob(j, S) == (1.0 / (S - j) if j < S - 1 else 1.0)
        for s in range(S + 1):
            assert lin.clean_share(s / S) == s / S


@pytest.mark.parametrize("s", ALL, ids=repr)
def test_elbo_weight_is_minus_alpha_prime_over_one_minus_alpha_finite_differences(s):
    t = torch.linspace(0.01, 0.99, 99, dtype=torch.float64)
    h = 1e-6
    fd = (s.alpha(t + h) - s.alpha(t - h)) / (2 * h)
    torch.testing.assert_close(s.alpha_prime(t), fd, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(s.elbo_weight(t), -fd / (1 - s.alpha(t)), rtol=1e-7, atol=0)
    assert torch.equal(s.mask_prob(t), 1 - s.alpha(t))
    assert float(s.alpha(0.0)) == pytest.approx(1.0) and (s.alpha(t).diff() < 0).all()
    # Python floats give the same numbers as float64 tensors
    assert s.alpha(0.3) == pytest.approx(float(s.alpha(torch.tensor(0.3, dtype=torch.float64))), rel=1e-15)


@pytest.mark.parametrize("s", ALL, ids=repr)
def test_schedule_weighted_mdlm_loss_matches_a_plain_float64_loop(s):
    B, T = 6, 9
    x = data(B, T)
    model = FixedLogits(B, T, torch.float64)
    t = s.sample_t(B, torch.Generator().manual_seed(1)).double()
    noise = torch.rand(B, T, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got, _ = mdlm_loss(model, x, MASK, t=t, noise=noise, schedule=s)
    L = model.logits.detach().tolist()
    total = 0.0
    for b in range(B):
        tb = float(t[b])
        if isinstance(s, CosineSchedule):
            mp = (1 - s.eps) * (1 - math.cos(math.pi * tb / 2))
            w = (math.pi / 2) * math.sin(math.pi * tb / 2) / (1 - math.cos(math.pi * tb / 2))
        elif isinstance(s, LogLinearSchedule):
            mp, w = (1 - s.eps) * tb, 1 / tb
        else:
            mp, w = tb, 1 / tb
        acc = 0.0
        for i in range(T):
            if float(noise[b, i]) < mp:
                row = L[b][i][:MASK] + L[b][i][MASK + 1:]  # the mask token is never predicted
                lse = max(row) + math.log(sum(math.exp(v - max(row)) for v in row))
                acc += lse - L[b][i][int(x[b, i])]
        total += w * acc / T
    assert got.item() == pytest.approx(total / B, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("s", ALL, ids=repr)
def test_sample_t_is_antithetic_on_the_training_range(s):
    t = s.sample_t(8, torch.Generator().manual_seed(3))
    assert ((t >= s.t_min - 1e-7) & (t <= 1)).all()
    torch.testing.assert_close(t.sort().values.diff(), torch.full((7,), (1 - s.t_min) / 8), atol=1e-6, rtol=0)


@pytest.mark.parametrize("s", ALL, ids=repr)
def test_expected_loss_of_an_input_independent_model_is_the_alpha_drop(s):
    """E_t E_mask[w(t) * masked NLL] = (alpha(t_min) - alpha(1)) / (1 - t_min) * NLL when the logits ignore the
    input (t ~ U[t_min, 1]): the weight and the mask probability together integrate -alpha' over the times."""
    B, T = 4000, 32
    x = torch.zeros(B, T, dtype=torch.long)
    logits = torch.zeros(1, 1, V, dtype=torch.float64)
    model = lambda noisy, **kw: logits.expand(B, T, V)  # noqa: E731
    g = torch.Generator().manual_seed(0)
    loss, _ = mdlm_loss(model, x, MASK, generator=g, schedule=s)
    nll = math.log(V - 1)
    expected = (float(s.alpha(s.t_min)) - float(s.alpha(1.0))) / (1 - s.t_min) * nll
    assert loss.item() == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize("s", ALL, ids=repr)
def test_ancestral_reveal_probabilities_follow_the_schedule(s):
    S = 12
    remaining = 1.0
    for j in range(S):
        remaining *= 1 - s.reveal_prob(j, S)
        want = 1 - s.clean_share((j + 1) / S)
        assert remaining == pytest.approx(want, abs=1e-12)
    assert remaining == 0.0
    # the drawn counts have the binomial mean
    n = torch.full((20000,), 10)
    k = ancestral_count(n, 3, S, torch.Generator().manual_seed(0), s)
    assert float(k.double().mean()) == pytest.approx(10 * s.reveal_prob(3, S), abs=0.05)


def test_count_schedules_and_the_noise_schedules():
    # linear counts: the linear schedule's clean share; cosine counts: MaskGIT's, the cosine mask probability
    for total, S in ((64, 8), (1000, 10), (7, 3)):
        cum = 0
        for s, c in enumerate(linear_schedule(total, S), 1):
            cum += c
            assert abs(cum - total * LinearSchedule().clean_share(s / S)) <= 1
        cum = 0
        for s, c in enumerate(unmask_schedule(total, S), 1):
            cum += c
            assert abs(cum - total * CosineSchedule(eps=0.0).mask_prob(s / S)) <= 1


def test_registry_and_validation():
    assert set(SCHEDULES) == {"linear", "loglinear", "cosine"}
    assert isinstance(get_schedule("cosine", eps=0.01), CosineSchedule)
    s = LogLinearSchedule()
    assert get_schedule(s) is s
    with pytest.raises(UserError, match="noise: 'sigmoid' is not one of"):
        get_schedule("sigmoid")
    with pytest.raises(ConfigError, match="eps"):
        LinearSchedule(eps=1.0)
    with pytest.raises(ConfigError, match="t_lo"):
        CosineSchedule(t_lo=0.0)
    with pytest.raises(ConfigError):
        LinearSchedule(eps=float("nan"))


def test_unmasking_registry_is_renamed():
    import dlmlab.sampling.schedules as unmask

    assert not hasattr(unmask, "SCHEDULES")  # one SCHEDULES in the toolkit: the noise schedules
    assert set(unmask.UNMASK_SCHEDULES) == {"cosine", "linear"}
    counts = unmask.UNMASK_SCHEDULES["cosine"](20, 4)
    assert sum(counts) == 20 and counts == sorted(counts)  # MaskGIT's cosine: few first
    assert SCHEDULES["cosine"] is CosineSchedule
