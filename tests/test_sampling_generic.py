"""The generic diffusion sampler: any bidirectional model with an explicit mask id (required), Dream's shifted
logits, PreDiff through the same Denoiser interface, and no dependency on the PreDiff study wrapper."""


import pytest
import torch

from dlmlab.errors import UserError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.sampling import (DecodeConfig, Denoiser, DiffusionSampleConfig, TraceConfig, as_denoiser, decode,
                             generate, sample_diffusion)

V = 30  # data ids 0..28, the mask 29
MASK = V - 1


def mdlm(seed=0, attn_mask="bidirectional"):
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64,
                            positions="rope", attn_mask=attn_mask)
    return Transformer(cfg).double().eval()


class Plain(torch.nn.Module):
    """A bare ``tokens -> logits`` callable around a model (no cfg, no KV cache, no hooks)."""

    def __init__(self, inner, shift=False):
        super().__init__()
        self.inner, self.shift = inner, shift

    def forward(self, tokens):
        out = self.inner(tokens)
        if self.shift:  # Dream's convention: position i-1 predicts token i (the last position predicts nothing)
            out = torch.cat([out[:, 1:], out[:, -1:]], 1)
        return out


def prompt(B=3, P=5):
    return torch.randint(0, MASK, (B, P), generator=torch.Generator().manual_seed(1))


def gen(model, cfg, **kw):
    return generate(model, prompt(), 12, cfg, torch.Generator().manual_seed(4), record=True,
                    trace=TraceConfig(logits=True), **kw)


def test_mask_id_is_required_and_never_added():
    m = mdlm()
    for call in (lambda: generate(m, prompt(), 4), lambda: decode(m, prompt(), 2),
                 lambda: sample_diffusion(m, prompt(), 4)):
        with pytest.raises(UserError, match="mask_id is required") as e:
            call()
        assert "\n" not in str(e.value)
    assert m.cfg.vocab_size == V  # nothing was added to the model
    with pytest.raises(UserError, match="outside the model vocabulary"):
        generate(m, prompt(), 4, mask_id=V)


def test_causal_models_are_refused():
    with pytest.raises(UserError, match="causal"):
        generate(mdlm(attn_mask="causal"), prompt(), 4, mask_id=MASK)
    from dlmlab.models.factory import build_model

    with pytest.raises(UserError, match="mamba model cannot denoise"):
        generate(build_model("mamba", vocab_size=V, d_model=16, n_layers=1), prompt(), 4, mask_id=MASK)


@pytest.mark.parametrize("schedule,order", [("cosine", "confidence"), ("ancestral", "random"), ("linear", "margin")])
def test_a_plain_callable_decodes_like_the_toolkit_model(schedule, order):
    m = mdlm()
    cfg = DecodeConfig(steps=5, unmask_rule=schedule, order=order, kv_reuse="none", block_len=6, temperature=0.8)
    ref = gen(m, cfg, mask_id=MASK)
    got = gen(Plain(m), cfg, mask_id=MASK)
    assert torch.equal(ref.tokens, got.tokens) and not (got.tokens == MASK).any()
    for a, b in zip(ref.trajectory, got.trajectory):
        torch.testing.assert_close(a.logits, b.logits, atol=1e-12, rtol=0)


def test_a_plain_callable_refuses_caches_and_hooks_in_one_line():
    p = Plain(mdlm())
    with pytest.raises(UserError, match="kv_reuse='none'") as e:
        generate(p, prompt(), 4, DecodeConfig(kv_reuse="prompt"), mask_id=MASK)
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="attention"):
        generate(p, prompt(), 4, DecodeConfig(kv_reuse="none", attention="block_causal"), mask_id=MASK)
    with pytest.raises(UserError, match="hook"):
        generate(p, prompt(), 4, DecodeConfig(kv_reuse="none"), mask_id=MASK, trace=TraceConfig(hooks=["blocks.0.resid_post"]))


def test_shifted_logits_decode_like_the_aligned_model():
    m = mdlm()
    cfg = DecodeConfig(steps=6, kv_reuse="none", temperature=0.9)
    ref = gen(m, cfg, mask_id=MASK)
    got = gen(Plain(m, shift=True), cfg, mask_id=MASK, shift_logits=True)
    assert torch.equal(ref.tokens, got.tokens)
    wrong = gen(Plain(m, shift=True), cfg, mask_id=MASK)  # forgetting the flag decodes something else
    assert not torch.equal(ref.tokens, wrong.tokens)
    with pytest.raises(UserError, match="prompt"):
        decode(Plain(m, shift=True), torch.full((1, 4), MASK), 0, cfg, mask_id=MASK, shift_logits=True)


@pytest.mark.parametrize("cache", ["prompt", "prefix", "dual"])
def test_shifted_toolkit_model_block_causal_caches_are_exact(cache):
    m = mdlm()
    kw = dict(steps=8, block_len=4, attention="block_causal", temperature=0.9)
    ref = gen(m, DecodeConfig(kv_reuse="none", **kw), mask_id=MASK, shift_logits=True)
    got = gen(m, DecodeConfig(kv_reuse=cache, **kw), mask_id=MASK, shift_logits=True)
    assert got.exactness == "exact"
    assert torch.equal(ref.tokens, got.tokens)
    for a, b in zip(ref.trajectory, got.trajectory):
        torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)


def test_sample_diffusion_takes_any_bidirectional_model():
    m = mdlm()
    a = sample_diffusion(m, prompt(), 8, DiffusionSampleConfig(steps=4), torch.Generator().manual_seed(0), mask_id=MASK)
    b = sample_diffusion(Plain(m), prompt(), 8, DiffusionSampleConfig(steps=4), torch.Generator().manual_seed(0),
                         mask_id=MASK)
    assert torch.equal(a, b) and a.shape == (3, 13) and not (a == MASK).any()


def test_prediff_plugs_in_through_the_denoiser_interface():
    from dlmlab.prediff import PreDiffLM
    from dlmlab.prediff.model import PreDiffDenoiser

    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64)
    pm = PreDiffLM(Transformer(cfg)).double().eval()
    den = as_denoiser(pm)
    assert isinstance(den, PreDiffDenoiser) and isinstance(den, Denoiser) and den.mask_id == pm.mask_id == V
    assert as_denoiser(pm, pm.mask_id).mask_id == V
    with pytest.raises(UserError, match="differs"):
        as_denoiser(pm, 3)
    a = generate(pm, prompt(), 6, DecodeConfig(steps=3), torch.Generator().manual_seed(0))
    b = generate(den, prompt(), 6, DecodeConfig(steps=3), torch.Generator().manual_seed(0))
    assert torch.equal(a.tokens, b.tokens)


def test_the_decoder_puts_a_training_model_in_eval_mode_and_leaves_an_eval_model_alone():
    """``Module.eval`` walks every submodule: skipped when nothing is training (same tokens either way)."""
    m = mdlm()
    calls = []
    real = m.eval
    m.eval = lambda: (calls.append(1), real())[1]
    cfg = DecodeConfig(threshold=0.9, kv_reuse="none")
    a = generate(m, prompt(), 6, cfg, torch.Generator().manual_seed(0), mask_id=MASK).tokens
    assert calls == []  # already in eval mode
    m.blocks[0].train()  # one submodule training is enough to need eval()
    b = generate(m, prompt(), 6, cfg, torch.Generator().manual_seed(0), mask_id=MASK).tokens
    assert calls == [1] and not any(x.training for x in m.modules()) and torch.equal(a, b)
