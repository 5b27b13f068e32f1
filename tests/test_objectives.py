"""Objectives: AR loss, MDLM (mask never predicted, 1/t weight, antithetic t, ELBO), given-mask loss."""

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_transformer
from dlmlab.objectives import (MaskedDiffusionObjective, ar_loss, corrupt, elbo_bound, given_mask_loss, masked_nll,
                               mdlm_loss)
from dlmlab.objectives import schedule
from dlmlab.objectives.mdlm import log_probs_no_mask
from dlmlab.training import TrainConfig, train

V = 23
MASK = V - 1


class FixedLogits(torch.nn.Module):
    """A 'model' whose logits are a parameter [B,T,V]; records the input it saw."""

    def __init__(self, B, T, seed=0):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.randn(B, T, V, generator=torch.Generator().manual_seed(seed)))
        self.seen = None

    def forward(self, x, **kw):
        self.seen = x
        return self.logits


def data(B=4, T=10, seed=0):
    return torch.randint(0, V - 1, (B, T), generator=torch.Generator().manual_seed(seed))


def test_ar_loss_is_next_token_ce():
    x = data()
    model = FixedLogits(4, 9)
    loss, m = ar_loss(model, x)
    ref = F.cross_entropy(model.logits.reshape(-1, V), x[:, 1:].reshape(-1))
    assert torch.allclose(loss, ref) and math.isclose(m["ppl"], math.exp(ref.item()), rel_tol=1e-6)
    assert torch.equal(model.seen, x[:, :-1])


def test_mask_token_is_never_predicted():
    logits = torch.randn(2, 5, V)
    logp = log_probs_no_mask(logits, MASK)
    assert torch.isinf(logp[..., MASK]).all() and (logp[..., MASK] < 0).all()
    assert torch.allclose(logp.exp().sum(-1), torch.ones(2, 5), atol=1e-6)
    assert logits[..., MASK].isfinite().all()  # the input is not modified in place
    # even a huge mask logit does not change the other tokens' probabilities
    big = logits.clone()
    big[..., MASK] = 1e4
    assert torch.allclose(log_probs_no_mask(big, MASK), logp)


def test_corrupt_masks_with_probability_t_and_respects_maskable():
    x = data(B=2, T=4000)
    t = torch.tensor([0.2, 0.7])
    noisy, masked = corrupt(x, t, MASK, generator=torch.Generator().manual_seed(0))
    assert torch.equal(noisy == MASK, masked)
    assert torch.equal(noisy[~masked], x[~masked])
    rates = masked.float().mean(1)
    assert abs(rates[0] - 0.2) < 0.03 and abs(rates[1] - 0.7) < 0.03
    maskable = torch.zeros_like(x, dtype=torch.bool)
    maskable[:, 100:] = True
    _, masked = corrupt(x, t, MASK, generator=torch.Generator().manual_seed(0), maskable=maskable)
    assert not masked[:, :100].any() and masked[:, 100:].any()


def test_mdlm_loss_weight_is_one_over_t():
    x = data()
    model = FixedLogits(4, 10)
    t = torch.tensor([0.1, 0.3, 0.6, 0.9])
    noise = torch.rand(4, 10, generator=torch.Generator().manual_seed(3))
    loss, m = mdlm_loss(model, x, MASK, t=t, noise=noise)
    masked = noise < t[:, None]
    assert torch.equal(model.seen, torch.where(masked, MASK, x))
    nll = -log_probs_no_mask(model.logits, MASK).gather(-1, x[..., None]).squeeze(-1)
    ref = ((nll * masked).sum(1) / t / 10).mean()
    assert torch.allclose(loss, ref, atol=1e-6)
    assert math.isclose(m["ppl_bound"], math.exp(ref.item()), rel_tol=1e-5)
    # doubling t halves each sequence's weight (same masked set when noise is 0)
    zero = torch.zeros(4, 10)
    l1, _ = mdlm_loss(model, x, MASK, t=t, noise=zero)
    l2, _ = mdlm_loss(model, x, MASK, t=t * 0.5, noise=zero)
    assert torch.allclose(l2, 2 * l1, atol=1e-5)


def test_antithetic_t_is_evenly_spread():
    for seed in range(5):
        t = schedule.LinearSchedule(eps=1e-3).sample_t(8, torch.Generator().manual_seed(seed))
        assert ((t >= 1e-3) & (t <= 1)).all()
        gaps = t.sort().values.diff()
        assert torch.allclose(gaps, torch.full((7,), (1 - 1e-3) / 8), atol=1e-6)
    t = schedule.LinearSchedule().sample_t(1000, torch.Generator().manual_seed(0), antithetic=False)
    assert t.std() > 0.2
    assert torch.allclose(schedule.elbo_weight(torch.tensor([0.25])), torch.tensor([4.0]))
    assert torch.allclose(schedule.mask_prob(torch.tensor([0.3])), torch.tensor([0.3]))


def test_given_mask_loss_only_scores_chosen_positions():
    x = data()
    model = FixedLogits(4, 10)
    chosen = torch.zeros(4, 10, dtype=torch.bool)
    chosen[0, 2] = chosen[1, 5] = chosen[3, 9] = True
    loss, _ = given_mask_loss(model, x, chosen, MASK)
    assert torch.equal(model.seen, torch.where(chosen, MASK, x))
    loss.backward()
    g = model.logits.grad.abs().sum(-1)
    assert torch.equal(g > 0, chosen)
    ref = masked_nll(model.logits.detach(), x, chosen, MASK).sum() / 3
    assert torch.allclose(loss, ref)


def nelbo_f64(model, tokens: torch.Tensor, n_samples: int, seed: int = 0) -> float:
    """elbo_bound recomputed in float64 from the same draws (per sample: t [B] from the linear schedule, then
    uniforms [B, T]; masked where u < t): the mean over samples and rows of sum_masked -log p(x_i) / (t T)."""
    import copy

    m64 = copy.deepcopy(model).double()
    g, B, T = torch.Generator().manual_seed(seed), *tokens.shape
    total = 0.0
    for _ in range(n_samples):
        t = schedule.get_schedule("linear", eps=1e-3).sample_t(B, g).double()
        masked = torch.rand(tokens.shape, generator=g).double() < t[:, None]
        with torch.no_grad():
            logits = m64(torch.where(masked, MASK, tokens))
        logits[..., MASK] = -math.inf  # the mask token is never predicted
        nll = -logits.log_softmax(-1).gather(-1, tokens[..., None])[..., 0]
        total += float(((nll * masked).sum(1) / (t * T)).mean())
    return total / n_samples


def test_mdlm_bound_finite_and_decreasing_when_training():
    torch.manual_seed(0)
    model = tiny_transformer(vocab_size=V, attn_mask="bidirectional", positions="rope", d_mlp=0, n_layers=1)
    # a learnable corpus: repeated short patterns over the 22 data ids
    base = torch.arange(22).repeat(40)

    def make_batch(step, gen):
        starts = torch.randint(0, len(base) - 16, (16,), generator=gen)
        return torch.stack([base[s:s + 16] for s in starts.tolist()])

    val = torch.stack([base[s:s + 16] for s in range(0, 200, 20)])
    before = elbo_bound(model, val, MASK, n_samples=4)
    assert before == pytest.approx(nelbo_f64(model, val, n_samples=4), rel=1e-5)
    hist = train(model, TrainConfig(steps=150, batch_size=16, lr=1e-2, warmup_steps=10, progress=False, log_every=15),
                 make_batch, MaskedDiffusionObjective(MASK))
    after = elbo_bound(model, val, MASK, n_samples=4)
    assert all(math.isfinite(r["loss"]) for r in hist)
    assert after == pytest.approx(nelbo_f64(model, val, n_samples=4), rel=1e-5) and after < 0.6 * before
    # deterministic given the seed
    assert elbo_bound(model, val, MASK, n_samples=4) == after
    with pytest.raises(Exception):
        mdlm_loss(model, torch.full((1, 4), V), MASK, generator=torch.Generator())


def test_what_the_pipeline_asks_each_objective_instead_of_its_name():
    """Issue 35: code asks an objective (next_token, denoises, shift_logits, window) rather than comparing its
    name; the prediff methods and the interp loss read ``next_token``."""
    from dlmlab.interp.loss import call_with_return_type, next_token_loss
    from dlmlab.objectives import ARObjective, GivenMaskObjective, PrefixDiffusionObjective
    from dlmlab.prediff import METHODS

    asked = {type(o).__name__ + ("" if o.mask_id is None else "(mask)"): (o.next_token, o.denoises, o.shift_logits,
                                                                         o.window(8))
             for o in (ARObjective(), MaskedDiffusionObjective(5), GivenMaskObjective(), GivenMaskObjective(5),
                       PrefixDiffusionObjective(8, 10))}
    assert asked == {"ARObjective": (True, False, True, 9), "MaskedDiffusionObjective(mask)": (False, True, False, 8),
                     "GivenMaskObjective": (False, False, True, 9), "GivenMaskObjective(mask)": (False, False, False, 8),
                     "PrefixDiffusionObjective": (False, False, False, 8)}
    assert {k for k, m in METHODS.items() if not m.is_diffusion} == {"ar_control"}
    m = tiny_transformer()
    x = torch.randint(0, 10, (2, 6), generator=torch.Generator().manual_seed(0))
    want = next_token_loss(m(x), x)
    assert torch.equal(call_with_return_type(m, m, x, return_type="loss", objective=ARObjective()), want)
