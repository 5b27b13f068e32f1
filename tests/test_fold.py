"""Norm folding both ways: fold_ln (TransformerLens's exact fold, normalisation kept) against a float64
computation, and the frozen-scale linearisation under its own name; one norm-scale function and
one-line errors on models without the norms folding needs.  (Older frozen-scale tests:
tests/test_induction_analysis.py and tests/test_float64_analyses.py.)"""

import pytest
import torch
from torch import nn

from conftest import tiny_transformer
from dlmlab.analysis import fold
from dlmlab.errors import UserError
from dlmlab.models.mamba import Mamba, MambaConfig
from dlmlab.models.norm_scale import norm_scale, scale_like_norm
from dlmlab.models.mamba2 import Mamba2, Mamba2Config
from dlmlab.models.norm import RMSNorm
from dlmlab.models.recurrent import RecurrentConfig, RecurrentModel


def toks(b=4, t=16, v=23, seed=1):
    return torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(seed))


def big_norms(model):
    """Norm weights and biases far from 1 / 0 so a mistake in folding them shows."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (nn.LayerNorm, RMSNorm)):
                mod.weight.copy_(torch.rand_like(mod.weight) * 2 + 0.2)
                if getattr(mod, "bias", None) is not None:
                    mod.bias.copy_(torch.randn_like(mod.bias) * 0.5)
    return model


CASES = [dict(norm="layernorm"), dict(norm="rmsnorm"), dict(norm="layernorm", d_mlp=0),
         dict(norm="layernorm", mlp="swiglu", bias=False), dict(norm="rmsnorm", mlp="swiglu", positions="rope"),
         dict(norm="layernorm", positions="alibi", attn_mask="bidirectional")]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_fold_ln_is_exact_in_float64(kw):
    model = big_norms(tiny_transformer(**kw)).double()
    x = toks()
    folded = fold.fold_ln(model)
    with torch.no_grad():
        assert (folded(x) - model(x)).abs().max() < 1e-10
    # the norms are pure normalisation now; the original is untouched (and still tied)
    for mod in folded.modules():
        if isinstance(mod, (nn.LayerNorm, RMSNorm)):
            assert torch.equal(mod.weight, torch.ones_like(mod.weight))
            if getattr(mod, "bias", None) is not None:
                assert torch.equal(mod.bias, torch.zeros_like(mod.bias))
    assert model.unembed.weight is model.tok_emb.weight and folded.unembed.weight is not folded.tok_emb.weight
    assert not folded.cfg.tie_embeddings
    if kw["norm"] == "layernorm":  # reading weights centred; writing weights centred (TransformerLens)
        assert folded.blocks[0].attn.W_q.weight.mean(-1).abs().max() < 1e-12
        assert folded.tok_emb.weight.mean(-1).abs().max() < 1e-12
        assert folded.blocks[1].attn.W_o.weight.mean(0).abs().max() < 1e-12


@pytest.mark.parametrize("kw", CASES[:3], ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_fold_ln_float32_matches_float64_and_keeps_the_top_token(kw):
    model = big_norms(tiny_transformer(**kw))
    x = toks(8, 24)
    with torch.no_grad():
        exact = model.double()(x)  # float64 reference of the original
        model.float()
        got = fold.fold_ln(model)(x).double()
    assert (got - exact).abs().max() < 1e-4
    top2 = exact.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 1e-3  # positions whose top token float32 can resolve
    assert clear.float().mean() > 0.9
    assert torch.equal(got.argmax(-1)[clear], exact.argmax(-1)[clear])
    gap = fold.fold_gap(model, fold.fold_ln(model), x)
    assert gap["max_abs_logit_diff"] < 1e-4 and gap["mean_kl"] < 1e-8


def test_fold_ln_options():
    model = big_norms(tiny_transformer()).double()
    x = toks()
    with torch.no_grad():
        want = model(x).log_softmax(-1)
        plain = fold.fold_ln(model, center_writing_weights=False)
        assert torch.allclose(plain(x).log_softmax(-1), want, atol=1e-10)
        assert plain.tok_emb.weight.mean(-1).abs().max() > 1e-6  # not centred
        centred = fold.fold_ln(model, center_unembed=True)
        out = centred(x)
        assert torch.allclose(out.log_softmax(-1), want, atol=1e-10) and out.mean(-1).abs().max() < 1e-10
        # folding twice changes nothing more
        assert (fold.fold_ln(fold.fold_ln(model))(x).log_softmax(-1) - want).abs().max() < 1e-10


@pytest.mark.parametrize("make", [
    lambda: Mamba(MambaConfig(vocab_size=23, d_model=16, n_layers=2, d_state=4, scan="chunked")),
    lambda: Mamba2(Mamba2Config(vocab_size=23, d_model=16, n_layers=2, d_state=4, headdim=8)),
    lambda: RecurrentModel(RecurrentConfig(cell="gru", vocab_size=23, d_model=8, n_layers=2, final_norm="layernorm")),
], ids=["mamba", "mamba2", "gru"])
def test_fold_ln_and_norm_scales_on_other_families(make):
    torch.manual_seed(0)
    model = big_norms(make()).double().eval()
    x = toks()
    with torch.no_grad():
        assert (fold.fold_ln(model)(x) - model(x)).abs().max() < 1e-10
    scales = fold.norm_scales(model, x)
    _, c = model.run_with_cache(x, [f"blocks.{len(model.blocks) - 1}.resid_post"])
    want = float(norm_scale(model.ln_final, c[f"blocks.{len(model.blocks) - 1}.resid_post"]).mean())
    assert abs(scales["ln_final"] - want) <= 1e-12 * want  # the final norm's mean scale on x
    frozen, linear = fold.freeze_norm_scales(model, scales), fold.fold_ln_frozen_scale(model, scales)
    with torch.no_grad():
        assert (frozen(x) - linear(x)).abs().max() < 1e-10


def test_frozen_scale_fold_is_an_approximation():
    assert "freezing" in fold.fold_ln_frozen_scale.__doc__
    model = big_norms(tiny_transformer()).double()
    x = toks()
    linear = fold.fold_ln_frozen_scale(model, fold.norm_scales(model, x))
    assert fold.fold_gap(model, linear, x)["max_abs_logit_diff"] > 1e-6  # not the same function
    with pytest.raises(UserError, match="frozen scales"):
        fold.fold_ln(fold.freeze_norm_scales(model, fold.norm_scales(model, x)))
    with pytest.raises(KeyError, match="no frozen scale"):
        fold.fold_ln_frozen_scale(model, {})


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm", "none"])
def test_norm_scale_reproduces_the_norm(kind):
    from dlmlab.models.norm import make_norm

    norm = make_norm(kind, 12, 1e-5).double()
    if kind != "none":
        big_norms(norm)
    x = torch.randn(3, 5, 12, dtype=torch.float64)
    s = norm_scale(norm, x)
    assert s.shape == (3, 5)
    bias = norm.bias if kind == "layernorm" else 0
    with torch.no_grad():
        assert torch.allclose(scale_like_norm(norm, x, s) + bias, norm(x), atol=1e-12)


def test_norm_scales_need_a_model_with_norms():
    class NoNorms(nn.Module):
        blocks = nn.ModuleList()

    with pytest.raises(UserError, match="ln_final, unembed"):
        fold.norm_scales(NoNorms(), toks())
    with pytest.raises(UserError, match="ln_final"):
        fold.fold_ln(NoNorms())


def test_fold_ln_of_a_loaded_gpt2_matches_hugging_face(tmp_path):
    """Peer: a tiny random Hugging Face GPT-2 (float64); the folded toolkit copy gives its logits."""
    transformers = pytest.importorskip("transformers")
    from dlmlab.models.hf_gpt2 import load_gpt2

    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=64, bos_token_id=None, eos_token_id=None)).double().eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    hf.save_pretrained(tmp_path)
    folded = fold.fold_ln(load_gpt2(tmp_path, dtype=torch.float64))
    x = torch.randint(0, 50, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = hf(x).logits
        logits, cache = folded.run_with_cache(x)
    assert (logits - want).abs().max() < 1e-10
    assert (cache.logit_lens().logits[-1] - want).abs().max() < 1e-10
