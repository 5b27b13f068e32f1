"""Logit lens over the denoising loop (issue 29, part 3): per layer and step; the last depth is the model's own
prediction; "when is a token decided"; Dream's shifted logits."""

from __future__ import annotations

import pytest
import torch

from dlmlab.errors import UserError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.sampling import DecodeConfig
from dlmlab.sampling.lens import lens_points, trajectory_lens
from dlmlab.sampling.trajectory_cache import generate_with_cache

V, MASK, P, G = 30, 29, 5, 12


def _model():
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64,
                            attn_mask="bidirectional", positions="rope")
    return Transformer(cfg).eval()


def _traj(m, cfg=None, shift=False, **kw):
    prompt = torch.randint(0, MASK, (2, P), generator=torch.Generator().manual_seed(1))
    return generate_with_cache(m, prompt, G, cfg or DecodeConfig(steps=6, temperature=0), torch.Generator().manual_seed(2),
                               mask_id=MASK, shift_logits=shift, names_filter=lens_points(m), **kw)


def test_lens_shapes_and_last_depth_is_the_models_prediction():
    m = _model()
    traj = _traj(m, DecodeConfig(steps=6))
    lens = trajectory_lens(traj, m, k=5)
    assert lens.labels == ["blocks.0.resid_pre", "blocks.1.resid_pre", "blocks.1.resid_post"]
    assert lens.entropy.shape == (6, 3, 2, P + G) and lens.top_ids.shape == (6, 3, 2, P + G, 5)
    for s, rec in enumerate(traj.records):  # temperature 1, top_p 1: the sampler drew from the model's softmax
        cand = rec.top_ids[..., 0] >= 0
        assert torch.equal(lens.top_ids[s, -1][cand], rec.top_ids[cand])
        torch.testing.assert_close(lens.top_probs[s, -1][cand].double(), rec.top_probs[cand], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(lens.entropy[s, -1][cand].double(), rec.entropy[cand], atol=1e-4, rtol=1e-4)


def test_decided_at_is_the_first_masked_step_whose_top1_is_the_final_token():
    m = _model()
    traj = _traj(m)  # greedy: at the commit step the last depth's top-1 is the committed token
    lens = trajectory_lens(traj, m)
    dec = lens.decided_at(traj)
    assert dec.shape == (3, 2, P + G)
    assert (dec[:, :, :P] == -1).all()  # the prompt is never masked
    commit_step = torch.stack([r.committed for r in traj.records]).float().argmax(0)  # [B, N]
    last = dec[-1, :, P:]
    assert ((last >= 0) & (last <= commit_step[:, P:])).all()
    for d in range(3):  # by definition: top-1 equals the final token at that step, never at an earlier masked step
        for b in range(2):
            for p in range(P, P + G):
                s = int(dec[d, b, p])
                hits = [t for t in range(traj.n_steps) if traj.masked(t)[b, p]
                        and int(lens.top_ids[t, d, b, p, 0]) == int(traj.tokens[b, p])]
                assert s == (hits[0] if hits else -1)


def test_dream_shift_reads_the_previous_position():
    m = _model()
    plain = trajectory_lens(_traj(m), m)
    traj = _traj(m, shift=True)
    lens = trajectory_lens(traj, m)
    assert (lens.top_ids[:, :, :, 0] == -1).all()
    for s, rec in enumerate(traj.records):
        cand = rec.top_ids[..., 0] >= 0
        assert torch.equal(lens.top_ids[s, -1][cand], rec.top_ids[cand])
    assert plain.top_ids.shape == lens.top_ids.shape


def test_lens_needs_its_points():
    m = _model()
    traj = generate_with_cache(m, torch.zeros(1, 3, dtype=torch.long), 4, DecodeConfig(steps=2),
                               mask_id=MASK, names_filter=["blocks.0.resid_post"])
    with pytest.raises(UserError, match="lens_points"):
        trajectory_lens(traj, m)


@pytest.mark.parametrize("family", ["mamba", "mamba2"])
def test_lens_on_a_recurrent_family_trained_to_denoise(family):
    from dlmlab.models.factory import build_model
    from dlmlab.sampling import ModelDenoiser

    torch.manual_seed(0)
    den = ModelDenoiser(build_model(family, vocab_size=V, d_model=16, n_layers=2).eval(), MASK, allow_causal=True)
    prompt = torch.randint(0, MASK, (2, P), generator=torch.Generator().manual_seed(1))
    traj = generate_with_cache(den, prompt, 6, DecodeConfig(steps=3), torch.Generator().manual_seed(2),
                               names_filter=lens_points(den.model))
    lens = trajectory_lens(traj, den)
    for s, rec in enumerate(traj.records):
        cand = rec.top_ids[..., 0] >= 0
        assert torch.equal(lens.top_ids[s, -1][cand], rec.top_ids[cand])


def test_lens_refuses_a_model_without_residual_stream_in_one_line():
    from dlmlab.models.factory import build_model
    from dlmlab.sampling import ModelDenoiser

    den = ModelDenoiser(build_model("gru", vocab_size=V, d_model=16, n_layers=2).eval(), MASK, allow_causal=True)
    traj = generate_with_cache(den, torch.zeros(1, P, dtype=torch.long), 4, DecodeConfig(steps=2),
                               names_filter=lens_points(den.model))
    with pytest.raises(UserError, match="residual stream"):
        trajectory_lens(traj, den)
