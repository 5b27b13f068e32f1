"""The trajectory cache (issue 29, part 1 and 6): one call samples and caches; a cached activation at step s equals a
fresh forward on that step's input (exact caches), an approximate cache is labelled; the decode itself is the plain
one, bit for bit; every denoiser (toolkit MDLM, PreDiff, a Mamba trained to denoise, LLaDA and Dream folders)."""

from __future__ import annotations

import pytest
import torch

from dlmlab.errors import UserError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.models.factory import build_model
from dlmlab.prediff import PreDiffLM
from dlmlab.sampling import DecodeConfig, ModelDenoiser, generate
from dlmlab.sampling.kv_reuse import block_causal_mask
from dlmlab.sampling.trajectory_cache import INDEX_BYTES, bytes_per_step, generate_with_cache, run_sampler_with_cache

V, MASK, P, G = 30, 29, 5, 12
POINT = "blocks.1.resid_post"


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64,
                            attn_mask="bidirectional", positions="rope", **kw)
    return Transformer(cfg).eval()


def _prompt(B=3):
    return torch.randint(0, MASK, (B, P), generator=torch.Generator().manual_seed(1))


def _g(seed=2):
    return torch.Generator().manual_seed(seed)


# tokens of decode at the commit before this issue (the plain decoder, no hooks): the decode must stay bit-identical
GOLDEN = {0: [[20, 3, 12, 7, 3, 16, 3, 18, 28, 6, 5, 27, 10, 28, 16, 12, 18],
              [1, 25, 19, 7, 7, 16, 9, 28, 28, 27, 9, 16, 5, 5, 18, 1, 28],
              [8, 24, 15, 23, 8, 5, 27, 16, 23, 1, 5, 23, 5, 28, 23, 20, 15]],
          1: [[20, 3, 12, 7, 3, 16, 15, 10, 24, 26, 28, 16, 9, 1, 28, 4, 0],
              [1, 25, 19, 7, 7, 23, 4, 4, 10, 10, 13, 25, 5, 10, 0, 16, 23],
              [8, 24, 15, 23, 8, 21, 17, 5, 16, 28, 10, 20, 25, 28, 16, 18, 20]]}
CFGS = [DecodeConfig(steps=6), DecodeConfig(threshold=0.05, block_len=4),
        DecodeConfig(steps=8, unmask_rule="ancestral", order="random"),
        DecodeConfig(steps=6, block_len=4, kv_reuse="prefix", attention="block_causal"),
        DecodeConfig(steps=6, kv_reuse="dual", block_len=4)]


@pytest.mark.parametrize("i", range(len(CFGS)))
def test_caching_leaves_the_decode_bit_identical(i):
    m, cfg = _model(), CFGS[i]
    plain = generate(m, _prompt(), G, cfg, _g(), mask_id=MASK, record=True)
    if i in GOLDEN:
        assert plain.tokens.tolist() == GOLDEN[i]
    # reading the residual stream leaves every number as it was (hooking the attention pattern would switch the
    # model to its explicit attention path, whose logits differ in the last bits)
    traj = generate_with_cache(m, _prompt(), G, cfg, _g(), mask_id=MASK, names_filter=[POINT])
    assert torch.equal(traj.tokens, plain.tokens) and traj.n_steps == plain.steps
    for a, b in zip(plain.trajectory, traj.records):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.entropy.nan_to_num(-1), b.entropy.nan_to_num(-1))
    assert traj.exact == (plain.exactness == "exact")


def test_cached_activation_equals_a_fresh_forward_at_every_step():
    m = _model()
    names = [POINT, "blocks.0.attn.pattern"]
    traj = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=6), _g(), mask_id=MASK, names_filter=names)
    assert traj.exact and traj.steps_cached == list(range(6))
    stack = traj.stack(POINT)
    assert stack.shape == (6, 3, P + G, 32) and traj.stack_present(POINT).all()
    for s in range(traj.n_steps):
        with torch.no_grad(), m.cache(names) as c:
            m(traj.step_input(s))
        assert torch.equal(traj[POINT, s], c[POINT])
        assert torch.equal(traj["blocks.0.attn.pattern", s], c["blocks.0.attn.pattern"])


def test_exact_block_causal_cache_matches_a_fresh_forward_where_computed_and_dual_is_labelled():
    m = _model()
    cfg = DecodeConfig(steps=6, block_len=4, kv_reuse="prefix", attention="block_causal")
    traj = generate_with_cache(m, _prompt(), G, cfg, _g(), mask_id=MASK, names_filter=[POINT])
    assert traj.exact
    N = P + G
    partial = 0
    for s in range(traj.n_steps):
        with torch.no_grad(), m.cache([POINT]) as c:
            m(traj.step_input(s), attn_mask=block_causal_mask(0, N, N, P, 4, False), prompt_len=P)
        here = traj.present(POINT, s)
        partial += int(not here.all())
        assert here.any() and torch.isnan(traj[POINT, s][~here]).all()
        torch.testing.assert_close(traj[POINT, s][here], c[POINT][here], atol=1e-5, rtol=1e-5)
    assert partial > 0  # the cached forwards ran only a window: absent elsewhere, and said so
    dual = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=6, kv_reuse="dual", block_len=4), _g(), mask_id=MASK,
                               names_filter=[POINT])
    assert not dual.exact and all(r.exact is False for r in dual.records)


def test_step_masks_partition_the_canvas_and_mask_rate():
    m = _model()
    traj = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=4), _g(), mask_id=MASK, names_filter=[POINT])
    N = P + G
    for s in range(traj.n_steps):
        parts = [traj.prompt, traj.masked(s), traj.committed_earlier(s)]
        assert torch.equal(sum(p.long() for p in parts), torch.ones(3, N, dtype=torch.long))
        assert not (traj.committed_now(s) & ~traj.masked(s)).any()
        assert torch.allclose(traj.mask_rate(s), traj.masked(s).float().mean(1))
    assert traj.mask_rate(0, over="generated").tolist() == [1.0] * 3
    assert traj.mask_rates().shape == (4, 3) and traj.commits_per_step().sum().item() == 3 * G


def test_bounded_memory_steps_positions_dtype_and_spill(tmp_path):
    m = _model()
    kw = dict(mask_id=MASK, names_filter=[POINT])
    full = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=6), _g(), **kw)
    few = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=6), _g(), steps=[1, 4], positions="masked",
                              dtype="float16", **kw)
    assert few.steps_cached == [1, 4] and few[POINT, 1].dtype == torch.float16
    for s in (1, 4):
        assert torch.equal(few.present(POINT, s), full.masked(s))
        here = few.present(POINT, s)
        torch.testing.assert_close(few[POINT, s][here].float(), full[POINT, s][here], atol=1e-2, rtol=1e-2)
    n = int(full.masked(1).sum() + full.masked(4).sum())
    assert few.nbytes() == n * (32 * 2 + INDEX_BYTES) == bytes_per_step(32, n, 2)
    committed = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=6), _g(), positions="committed", **kw)
    assert torch.equal(committed.present(POINT, 2), full.committed_now(2))
    spilled = generate_with_cache(m, _prompt(), G, DecodeConfig(steps=6), _g(), spill_dir=tmp_path / "acts", **kw)
    assert len(list((tmp_path / "acts").glob("step_*.safetensors"))) == 6
    assert torch.equal(spilled.stack(POINT), full.stack(POINT)) and spilled.nbytes() == full.nbytes()
    with pytest.raises(UserError, match="was not cached"):
        few[POINT, 2]
    with pytest.raises(UserError, match="positions must be one of"):
        generate_with_cache(m, _prompt(), G, DecodeConfig(steps=2), _g(), positions="some", **kw)
    with pytest.raises(UserError, match="no hook point matches"):
        generate_with_cache(m, _prompt(), G, DecodeConfig(steps=2), _g(), mask_id=MASK, names_filter=["blocks.9.x"])


def _prediff():
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64)
    return PreDiffLM(Transformer(cfg)).eval()


def _hf(kind, tmp_path):
    pytest.importorskip("transformers")
    import test_hf_llada_dream as h

    from dlmlab.rundir.load import load

    hf = h._peer("llama" if kind == "llada" else "qwen2")
    if kind == "llada":
        folder = h._write(tmp_path / "llada", h._llada_config(hf), h._llada_weights(hf))
    else:
        folder = h._dream_folder(tmp_path, hf, False)
    run = load(folder, dtype=torch.float64)
    return run.model, run.mask_id, run.shift_logits


@pytest.mark.parametrize("kind", ["transformer", "prediff", "mamba", "mamba2", "gru", "llada", "dream"])
def test_every_denoiser_caches_what_a_fresh_forward_computes(kind, tmp_path):
    shift = False
    if kind == "transformer":
        model, mask = _model(), MASK
    elif kind == "prediff":
        model = _prediff()
        mask = model.mask_id
    elif kind in ("mamba", "mamba2", "gru"):  # families trained to denoise with their own (causal) mask
        torch.manual_seed(0)
        model = ModelDenoiser(build_model(kind, vocab_size=V, d_model=16, n_layers=2).eval(), MASK, allow_causal=True)
        mask = MASK
    else:
        model, mask, shift = _hf(kind, tmp_path)
    B, N = 2, P + 8
    prompt = torch.randint(0, 20, (B, P), generator=torch.Generator().manual_seed(3))
    point = "blocks.1.resid_post"
    cfg = DecodeConfig(steps=4, self_cond=False)
    kw = {} if kind in ("prediff", "mamba", "mamba2", "gru") else {"mask_id": mask, "shift_logits": shift}
    plain = generate(model, prompt, 8, cfg, _g(), **kw)
    traj = generate_with_cache(model, prompt, 8, cfg, _g(), names_filter=[point], **kw)
    assert torch.equal(traj.tokens, plain.tokens) and traj.exact
    hooked = getattr(model, "backbone", None) if kind == "prediff" else getattr(model, "model", model)
    s = 2
    x = traj.step_input(s)
    with torch.no_grad(), hooked.cache([point]) as c:
        if kind == "prediff":
            model(x, (x[:, P:] == mask).float().mean(1), prompt_len=P)
        else:
            hooked(x)
    assert traj.stack(point).shape[:3] == (traj.n_steps, B, N)
    torch.testing.assert_close(traj[point, s], c[point].to(traj[point, s].dtype), atol=1e-6, rtol=1e-6)


def test_refused_without_hook_points():
    with pytest.raises(UserError, match="hook points"):
        run_sampler_with_cache(lambda x: torch.zeros(*x.shape, V), torch.full((1, 4), MASK), 0, DecodeConfig(steps=2),
                               mask_id=MASK, names_filter=[POINT])
