"""Interventions by step (issue 29, part 2): hooks that fire only at chosen steps and positions; an intervention at step
s changes nothing before s; patching trajectory A's activations at step s into trajectory B at step s."""

from __future__ import annotations

import pytest
import torch

from dlmlab.errors import UserError
from dlmlab.sampling import DecodeConfig, generate
from dlmlab.sampling.interventions import Intervention
from dlmlab.sampling.patching import patch_trajectory
from dlmlab.sampling.trajectory_cache import generate_with_cache

from traj_util import G, MASK, P, POINT, V, _model, _prompt, _run  # noqa: F401

def _same(a, b) -> bool:
    return torch.equal(a.tokens, b.tokens) and torch.equal(a.entropy.nan_to_num(-1), b.entropy.nan_to_num(-1))


@pytest.mark.parametrize("cfg", [DecodeConfig(steps=6), DecodeConfig(steps=6, block_len=4, kv_reuse="prefix",
                                                                      attention="block_causal")])
def test_an_intervention_at_step_s_changes_nothing_before_s(cfg):
    m = _model()
    plain = _run(m, cfg)
    big = torch.randn(32, generator=torch.Generator().manual_seed(0)) * 20
    for s in (1, 3):
        steered = _run(m, cfg, [Intervention(POINT, big, at_steps=[s], positions="masked")])
        assert all(_same(a, b) for a, b in zip(plain.trajectory[:s], steered.trajectory[:s]))
        assert not _same(plain.trajectory[s], steered.trajectory[s])


def test_interventions_that_never_fire_leave_the_decode_bit_identical():
    m = _model()
    cfg = DecodeConfig(steps=6)
    plain = _run(m, cfg)
    nowhere = torch.zeros(3, P + G, dtype=torch.bool)
    for ivs in ([], [Intervention(POINT, torch.ones(32), positions=nowhere)], [Intervention(POINT, torch.zeros(32))]):
        other = _run(m, cfg, ivs)
        assert all(_same(a, b) for a, b in zip(plain.trajectory, other.trajectory))


@pytest.mark.parametrize("positions", ["masked", "unmasked", "prompt", "generated", "all"])
def test_positions_choose_what_is_touched(positions):
    m = _model()
    v = torch.ones(32) * 3
    names = [POINT]
    plain = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=4), torch.Generator().manual_seed(2),
                                mask_id=MASK, names_filter=names)
    s = 2
    steered = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=4), torch.Generator().manual_seed(2),
                                  mask_id=MASK, names_filter=names,
                                  interventions=[Intervention(POINT, v, at_steps=[s], positions=positions)])
    x = plain.step_input(s)
    pos = torch.arange(P + G)[None].expand_as(x)
    want = {"masked": x == MASK, "unmasked": x != MASK, "prompt": pos < P, "generated": pos >= P,
            "all": torch.ones_like(x, dtype=torch.bool)}[positions]
    diff = steered[POINT, s] - plain[POINT, s]  # the cache records the activation as the intervention left it
    torch.testing.assert_close(diff[want], v.expand(int(want.sum()), 32))
    assert (diff[~want] == 0).all()


def test_replace_with_a_function_and_an_absolute_tensor():
    m = _model()
    cfg = DecodeConfig(steps=4)
    zero_fn = Intervention(POINT, lambda act, ctx: act * 0, mode="fn", at_steps=[1])
    zero_t = Intervention(POINT, torch.zeros(3, P + G, 32), mode="replace", at_steps=[1])
    a, b = _run(m, cfg, [zero_fn]), _run(m, cfg, [zero_t])
    assert all(_same(x, y) for x, y in zip(a.trajectory, b.trajectory))


def test_bad_interventions_are_one_line_errors():
    m = _model()
    with pytest.raises(UserError, match="no hook point matches"):
        _run(m, DecodeConfig(steps=2), [Intervention("blocks.7.resid_post", torch.ones(32))])
    with pytest.raises(UserError, match="positions must be one of"):
        Intervention(POINT, torch.ones(32), positions="everywhere")
    with pytest.raises(UserError, match="mode"):
        Intervention(POINT, torch.ones(32), mode="scale")
    with pytest.raises(UserError, match="hook points"):
        generate(lambda x: torch.zeros(*x.shape, V), _prompt(), 4, DecodeConfig(steps=2), mask_id=MASK,
                 interventions=[Intervention(POINT, torch.ones(32))])


def test_patching_across_trajectories():
    m = _model()
    cfg = DecodeConfig(steps=6)
    canvas = torch.cat([_prompt(), torch.full((3, G), MASK)], 1)
    # patching a trajectory with its own activations changes nothing
    same = patch_trajectory(m, canvas, P, cfg, names=[POINT], step=2, source_seed=2, target_seed=2, mask_id=MASK)
    assert same.n_changed == 0 and same.first_divergence.tolist() == [-1, -1, -1]
    assert torch.equal(same.patched.tokens, same.target.tokens)
    # another seed: B equals its plain self before the step, and the change in what was committed is reported
    other = patch_trajectory(m, canvas, P, cfg, names=[POINT, "blocks.1.resid_post"], step=2, source_seed=7,
                             target_seed=2, mask_id=MASK)
    assert all(_same(a, b) for a, b in zip(other.target.trajectory[:2], other.patched.trajectory[:2]))
    fd = other.first_divergence
    assert ((fd == -1) | (fd >= 2)).all()
    assert torch.equal(other.changed, other.patched.tokens != other.target.tokens)
    assert other.summary()["tokens_changed"] == other.n_changed
    assert other.source.steps_cached == [2]
    # another mask state: the source canvas has some positions already filled
    src = canvas.clone()
    src[:, P:P + 3] = 4
    masked_only = patch_trajectory(m, canvas, P, cfg, names=[POINT], step=0, source_seed=2, target_seed=2,
                                   source_canvas=src, positions="masked", mask_id=MASK)
    assert masked_only.step == 0 and masked_only.patched.steps == 6
    with pytest.raises(UserError, match="out of range"):
        patch_trajectory(m, canvas, P, cfg, names=[POINT], step=60, source_seed=2, target_seed=2, mask_id=MASK)
