"""Diffusion sampler: prompt-KV reuse is exact, schedule shape, sampling rules; AR sampler cache."""

import math

import pytest
import torch

from dlmlab.models import Transformer, TransformerConfig
from dlmlab.prediff import PreDiffLM
from dlmlab.sampling import DiffusionSampleConfig, sample_ar, sample_diffusion, sample_from_logits, top_p_filter, unmask_schedule


def trained_looking(positions="learned", shift=False, seed=0):
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64, positions=positions)
    m = PreDiffLM(Transformer(cfg), shift=shift).double().eval()
    with torch.no_grad():  # non-zero time / self-conditioning paths so they matter
        torch.nn.init.normal_(m.time_embed.fc2.weight, std=0.05)
        torch.nn.init.normal_(m.self_cond_proj.weight, std=0.2)
    return m


@pytest.mark.parametrize("positions,shift", [("learned", False), ("rope", False), ("learned", True)])
def test_prompt_kv_reuse_matches_recomputing_prompt(positions, shift):
    m = trained_looking(positions, shift)
    prompt = torch.randint(0, 39, (3, 7), generator=torch.Generator().manual_seed(1))
    cfg = DiffusionSampleConfig(steps=5, temperature=0.9, top_p=0.95, reuse_prompt_kv=True)
    a, la = sample_diffusion(m, prompt, 12, cfg, torch.Generator().manual_seed(5), return_logits=True)
    cfg.reuse_prompt_kv = False
    b, lb = sample_diffusion(m, prompt, 12, cfg, torch.Generator().manual_seed(5), return_logits=True)
    assert len(la) == len(lb) == 5
    for x, y in zip(la, lb):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=0)
    assert torch.equal(a, b)
    assert torch.equal(a[:, :7], prompt) and not (a == m.mask_id).any()


def test_self_conditioning_changes_later_steps():
    m = trained_looking()
    prompt = torch.randint(0, 39, (2, 5), generator=torch.Generator().manual_seed(1))
    _, la = sample_diffusion(m, prompt, 8, DiffusionSampleConfig(steps=4), torch.Generator().manual_seed(0), True)
    _, lb = sample_diffusion(m, prompt, 8, DiffusionSampleConfig(steps=4, self_cond=False),
                             torch.Generator().manual_seed(0), True)
    torch.testing.assert_close(la[0], lb[0])  # no previous prediction at the first step
    assert (la[1] - lb[1]).abs().max() > 1e-6


def test_unmask_schedule_is_cosine_and_complete():
    c = unmask_schedule(64, 8)
    assert sum(c) == 64 and len(c) == 8 and min(c) >= 1
    assert c == sorted(c) and c[0] < c[-1]  # few first, accelerating
    assert unmask_schedule(5, 32) == [1] * 5
    assert sum(unmask_schedule(100, 32)) == 100
    cum = 0
    for s, n in enumerate(unmask_schedule(1000, 10), 1):
        cum += n
        assert abs(cum - 1000 * (1 - math.cos(math.pi / 2 * s / 10))) <= 1
    with pytest.raises(ValueError):
        unmask_schedule(0, 8)


def test_confidence_order_commits_the_surest_positions_first():
    m = trained_looking()
    prompt = torch.randint(0, 39, (1, 4), generator=torch.Generator().manual_seed(3))
    out, logits = sample_diffusion(m, prompt, 10, DiffusionSampleConfig(steps=10, temperature=0),
                                   torch.Generator().manual_seed(0), return_logits=True)
    # greedy: the first committed position is where the top probability is largest
    lp = logits[0].clone()
    lp[..., m.mask_id] = float("-inf")
    first = lp.softmax(-1).max(-1).values[0].argmax().item()
    assert out[0, 4 + first] == lp[0, first].argmax()


def test_gumbel_sampling_matches_softmax_and_top_p():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    g = torch.Generator().manual_seed(0)
    toks, probs = sample_from_logits(logits.expand(20000, 4), 1.0, 1.0, g)
    freq = torch.bincount(toks, minlength=4).double() / 20000
    torch.testing.assert_close(freq, logits.double().softmax(-1), atol=0.015, rtol=0)
    assert probs.dtype == torch.float64
    f = top_p_filter(logits.double().log_softmax(-1), 0.8)
    assert torch.isinf(f[3]) and torch.isfinite(f[:2]).all()
    toks, _ = sample_from_logits(logits.expand(2000, 4), 1.0, 0.7, g)
    assert set(toks.tolist()) <= {0, 1}
    toks, _ = sample_from_logits(logits.expand(10, 4), 1.0, 1.0, g, banned=0)
    assert (toks != 0).all()
    with pytest.raises(ValueError, match="top_p"):
        sample_from_logits(logits, 1.0, 0.0)


def test_ar_sampler_cache_matches_no_cache():
    torch.manual_seed(0)
    m = Transformer(TransformerConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64)).double()
    prompt = torch.randint(0, 30, (2, 5))
    a = sample_ar(m, prompt, 10, generator=torch.Generator().manual_seed(1))
    b = sample_ar(m, prompt, 10, generator=torch.Generator().manual_seed(1), use_cache=False)
    assert a.shape == (2, 15) and torch.equal(a, b)
    with pytest.raises(ValueError, match="prompt"):
        sample_ar(m, prompt[:, :0], 3)


def test_sampler_rejects_bad_input():
    m = trained_looking()
    with pytest.raises(ValueError, match="mask token"):
        sample_diffusion(m, torch.full((1, 3), m.mask_id), 4)
    from dlmlab.config import ConfigError

    with pytest.raises(ConfigError, match="steps"):
        sample_diffusion(m, torch.zeros(1, 3, dtype=torch.long), 4, DiffusionSampleConfig(steps=0))
