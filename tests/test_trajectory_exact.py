"""Issue 37 part 1: the denoising-loop API is exact in every mode.  Interventions fire exactly at their steps with
the ancestral rule's output reuse and with exact KV reuse (approximate reuse is refused); a traced step holds every
active row; spill folders, step lists, intervention values and float64 lenses are checked in one line."""

from __future__ import annotations

import os

import pytest
import torch

from dlmlab.errors import UserError
from dlmlab.sampling import DecodeConfig, generate
from dlmlab.sampling.interventions import Intervention
from dlmlab.sampling.lens import lens_points, trajectory_lens
from dlmlab.sampling.patching import patch_trajectory
from dlmlab.sampling.trajectory_cache import generate_with_cache
import dlmlab.sampling.trajectory_cache as tc

from traj_util import G, MASK, P, POINT, V, _model, _prompt, _run  # noqa: F401

ANC = dict(steps=24, unmask_rule="ancestral")  # more steps than positions: many steps reveal nothing in a row


def _push(at):
    return [Intervention(POINT, torch.randn(32, generator=torch.Generator().manual_seed(0)) * 20, at_steps=at,
                         positions="masked")]


def _equal(a, b):
    assert a.steps == b.steps and torch.equal(a.tokens, b.tokens)
    for ra, rb in zip(a.trajectory, b.trajectory):
        assert torch.equal(ra.committed, rb.committed)
        torch.testing.assert_close(ra.entropy, rb.entropy, equal_nan=True, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("s", [3, 7, 15])
def test_ancestral_reuse_intervenes_exactly_at_its_step(s):
    m = _model()
    reuse, fresh = DecodeConfig(**ANC), DecodeConfig(**ANC, reuse_unchanged=False)
    _equal(_run(m, reuse), _run(m, fresh))  # reuse alone changes nothing
    _equal(_run(m, reuse, _push([s])), _run(m, fresh, _push([s])))


@pytest.mark.parametrize("s", [3, 7, 15])
def test_patching_under_ancestral_reuse_equals_patching_without_it(s):
    m = _model()
    canvas = torch.cat([_prompt(), torch.full((3, G), MASK)], 1)
    got = [patch_trajectory(m, canvas, P, DecodeConfig(**ANC, reuse_unchanged=r), names=[POINT], step=s,
                            source_seed=7, target_seed=2, mask_id=MASK) for r in (True, False)]
    _equal(got[0].patched, got[1].patched)  # commits and every step's entropies
    assert got[0].first_divergence.tolist() == got[1].first_divergence.tolist()


@pytest.mark.parametrize("kv", ["prefix", "dual", "prompt"])
@pytest.mark.parametrize("s", [2, 3])
def test_exact_kv_reuse_intervention_acts_only_at_its_step(kv, s):
    # step 2 starts block 1 (prefix / dual store block 0's keys and values then); the decode equals the one
    # without KV reuse, intervened at the same step, and not the one intervened at every later step
    m = _model()
    cfg = DecodeConfig(steps=6, block_len=4, kv_reuse=kv, attention="block_causal")
    ref = DecodeConfig(steps=6, block_len=4, kv_reuse="none", attention="block_causal")
    ivs = [Intervention(POINT, torch.randn(32, generator=torch.Generator().manual_seed(0)) * 20, at_steps=[s])]
    _equal(_run(m, cfg, ivs), _run(m, ref, ivs))
    persist = [Intervention(POINT, ivs[0].value, at_steps=range(s, 6))]
    assert not torch.equal(_run(m, ref, ivs).tokens, _run(m, ref, persist).tokens)


def test_approximate_kv_reuse_with_an_intervention_is_refused():
    with pytest.raises(UserError, match="approximate"):
        _run(_model(), DecodeConfig(steps=6, block_len=4, kv_reuse="dual"), _push([1]))


def test_a_traced_step_holds_every_active_row_and_the_decode_is_unchanged():
    m = _model()
    cfg = DecodeConfig(**ANC)
    traj = generate_with_cache(m, _prompt(), G, cfg, torch.Generator().manual_seed(2), mask_id=MASK,
                               names_filter=[POINT])
    plain = _run(m, cfg)
    assert torch.equal(traj.tokens, plain.tokens)
    assert traj.steps_cached == list(range(traj.n_steps)) and traj.stack(POINT).shape[0] == traj.n_steps
    for s in range(traj.n_steps):
        active = traj.masked(s).any(1)
        present = traj.present(POINT, s)
        assert torch.equal(present.any(1), active)  # every row still decoding, none other
        fresh = m.run_with_cache(traj.step_input(s), names_filter=[POINT])[1][POINT]
        torch.testing.assert_close(traj[POINT, s][present], fresh[present], rtol=1e-5, atol=1e-5)


def test_steps_the_decode_never_reaches_are_refused():
    m = _model()
    with pytest.raises(UserError, match=r"at_steps \[99\] out of range: the decode took 6 steps"):
        _run(m, DecodeConfig(steps=6), _push([2, 99]))
    with pytest.raises(UserError, match=r"steps \[99\] out of range"):
        generate_with_cache(m, _prompt(), G, DecodeConfig(steps=6), mask_id=MASK, names_filter=[POINT], steps=[1, 99])


def test_step_lists_and_values_are_checked_in_one_line():
    m = _model()
    with pytest.raises(UserError, match="steps must be integers"):
        generate_with_cache(m, _prompt(), G, DecodeConfig(steps=6), mask_id=MASK, names_filter=[POINT], steps=["a"])
    with pytest.raises(UserError, match="at_steps must be integers"):
        Intervention(POINT, torch.ones(32), at_steps=["a"])
    with pytest.raises(UserError, match=r"intervention at 'blocks.0.resid_post': value of shape \(7,\)"):
        _run(m, DecodeConfig(steps=6), [Intervention(POINT, torch.ones(7))])
    with pytest.raises(UserError, match=r"value of shape \(3, 4, 32\)"):  # a canvas tensor of the wrong length
        _run(m, DecodeConfig(steps=6), [Intervention(POINT, torch.ones(3, 4, 32))])


def _cache(m, spill):
    return generate_with_cache(m, _prompt(), G, DecodeConfig(steps=4), torch.Generator().manual_seed(2),
                               mask_id=MASK, names_filter=[POINT], spill_dir=spill)


def test_spill_dir_is_checked_before_the_decode(tmp_path, monkeypatch):
    m = _model()
    first = _cache(m, tmp_path / "a")
    before = first[POINT, 1].clone()
    with pytest.raises(UserError, match="is not empty"):
        _cache(m, tmp_path / "a")
    assert torch.equal(first[POINT, 1], before)  # the first trajectory's files are untouched
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        _cache(m, tmp_path / "f")
    monkeypatch.setattr(tc.os, "access", lambda *a: False)  # a read-only folder (root may write anywhere)
    with pytest.raises(UserError, match="cannot be written"):
        _cache(m, tmp_path / "ro")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_spill_dir(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    with pytest.raises(UserError, match="cannot be written"):
        _cache(_model(), d)


def test_lens_of_a_float64_trajectory():
    m = _model()
    kw = dict(mask_id=MASK, names_filter=lens_points(m))
    t32 = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=4), torch.Generator().manual_seed(0), **kw)
    t64 = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=4), torch.Generator().manual_seed(0),
                              dtype="float64", **kw)
    a, b = trajectory_lens(t32, m), trajectory_lens(t64, m)
    assert torch.equal(a.top_ids, b.top_ids)
    torch.testing.assert_close(a.entropy, b.entropy, equal_nan=True)


def test_records_match_a_float64_reference_of_the_drawn_distribution():
    # the per-step records are summed / ranked in float32 (issue 37: their cost); they stay within 1e-5 of float64
    from dlmlab.sampling import TraceConfig
    from dlmlab.sampling.gumbel import filtered_log_probs
    from dlmlab.sampling.orders import entropy

    m = _model()
    cfg = DecodeConfig(steps=6)
    res = generate(m, _prompt(), G, cfg, torch.Generator().manual_seed(2), mask_id=MASK, record=True,
                   trace=TraceConfig(logits=True))
    for rec in res.trajectory:
        s, e = rec.block_span
        logp = filtered_log_probs(rec.logits, cfg.temperature, cfg.top_p, banned=MASK)  # [B, block, V]
        cand = ~torch.isnan(rec.entropy[:, s:e])
        torch.testing.assert_close(rec.entropy[:, s:e][cand], entropy(logp)[cand], atol=1e-5, rtol=0)
        top_p, top_i = logp[cand].topk(5, dim=-1)
        assert torch.equal(rec.top_ids[:, s:e][cand], top_i)
        torch.testing.assert_close(rec.top_probs[:, s:e][cand], top_p.exp(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("kv", ["prefix", "dual"])
def test_patching_under_exact_kv_reuse_equals_patching_without_it(kv):
    m = _model()
    canvas = torch.cat([_prompt(), torch.full((3, G), MASK)], 1)
    got = [patch_trajectory(m, canvas, P, DecodeConfig(steps=6, block_len=4, kv_reuse=r, attention="block_causal"),
                            names=[POINT], step=3, source_seed=7, target_seed=2, mask_id=MASK) for r in (kv, "none")]
    _equal(got[0].patched, got[1].patched)
    assert got[0].source.present(POINT, 3).sum() == got[1].source.present(POINT, 3).sum()
