"""PreDiff wrapper: mask token, zero-initialised additions, hybrid flow, objectives."""

import pytest
import torch

from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives import step_batch
from dlmlab.prediff import METHODS, MethodConfig, PreDiffLM, add_mask_token, annealed_mask, diffusion_loss, make_task


def tiny(vocab=50, tie=True, **kw):
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=vocab, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=32,
                            tie_embeddings=tie, **kw)
    return Transformer(cfg).double().eval()


@pytest.mark.parametrize("tie", [True, False])
def test_add_mask_token_keeps_backbone_logits(tie):
    bb = tiny(tie=tie)
    m, mask_id = add_mask_token(bb)
    assert mask_id == 50 and m.cfg.vocab_size == 51
    x = torch.randint(0, 50, (2, 10))
    torch.testing.assert_close(m(x)[..., :50], bb(x), atol=1e-12, rtol=0)


def test_wrapper_starts_as_backbone_and_prompt_ignores_target():
    bb = tiny()
    m = PreDiffLM(bb).double().eval()
    x = torch.randint(0, 50, (2, 12))
    t = torch.tensor([0.3, 0.9], dtype=torch.float64)
    sc = torch.softmax(torch.randn(2, 12, 51, dtype=torch.float64), -1)
    with torch.no_grad():
        # zero-initialised time / self-conditioning paths: with the whole row as prompt it is the causal backbone
        full_prompt = m(x, t, prompt_len=12, self_cond=sc)[..., :50]
        torch.testing.assert_close(full_prompt, bb(x), atol=1e-10, rtol=0)
        # hybrid: prompt positions never see the target
        y = x.clone()
        y[:, 6:] = m.mask_id
        a, b = m(x, t, prompt_len=6), m(y, t, prompt_len=6)
    torch.testing.assert_close(a[:, :6], b[:, :6], atol=1e-12, rtol=0)
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-6


def test_shifted_wrapper_aligns_logits():
    bb = tiny()
    m = PreDiffLM(bb, shift=True).double().eval()
    x = torch.randint(0, 50, (1, 8))
    with torch.no_grad():
        raw = m.backbone(x, attn_mask="hybrid", prompt_len=3)
        al = m(x, prompt_len=3)
    torch.testing.assert_close(al[:, 1:], raw[:, :-1])


def test_diffusion_loss_trains_time_and_self_cond_paths():
    m = PreDiffLM(tiny()).double().train()
    x = torch.randint(0, 50, (4, 16))
    P = torch.tensor([1, 4, 8, 2])
    t = torch.tensor([0.2, 0.5, 0.8, 1.0], dtype=torch.float64)
    noise = torch.rand(4, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    loss, met = diffusion_loss(m, x, P, t, noise, torch.tensor([True, False, True, False]))
    loss.backward()
    assert torch.isfinite(loss) and met["ppl_bound"] > 1
    assert m.self_cond_proj.weight.grad.abs().sum() > 0
    assert m.time_embed.fc2.weight.grad.abs().sum() > 0
    # prompt tokens are never masked: the loss ignores a change that only touches prompts with t=1 ... but
    # corrupting the target with t -> 1 masks all of it
    assert met["masked_ce"] > 0


def test_annealed_masks_open_from_causal():
    P = torch.tensor([2, 5])
    g = torch.Generator().manual_seed(0)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    a0 = annealed_mask("annealed", P, 8, 0.0, g)
    assert torch.equal(a0, causal.expand(2, 1, 8, 8))
    assert annealed_mask("annealed", P, 8, 1.0, g).all()
    h1 = annealed_mask("hybrid_annealed", P, 8, 1.0, g)
    from dlmlab.models.masks import build_mask

    pos = torch.arange(8)
    assert torch.equal(h1, build_mask("hybrid", pos, pos, P))
    h0 = annealed_mask("hybrid_annealed", P, 8, 0.0, g)
    assert not h0[1, 0, 5, 6] and h0[1, 0, 6, 5] and not h0[1, 0, 1, 3]


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_takes_a_step(name):
    meth = METHODS[name]
    bb = tiny().float()
    model = bb if not meth.is_diffusion else PreDiffLM(bb, attention=meth.final_attention, shift=meth.shift)
    stream = torch.randint(0, 50, (500,))
    make_batch, objective = make_task(meth, stream, seq_len=16, batch=4, steps=10)
    g = torch.Generator().manual_seed(0)
    b = step_batch(objective, make_batch(3, g), g, 3)
    loss, met = objective.loss(model, b)
    loss.backward()
    assert torch.isfinite(loss) and "loss" in met


def test_method_validation():
    from dlmlab.config import ConfigError

    with pytest.raises(ConfigError, match="causal"):
        MethodConfig("x", attention="causal", objective="mdlm").validate()
    with pytest.raises(ValueError, match="mask_id"):
        PreDiffLM(tiny(), mask_id=99)
