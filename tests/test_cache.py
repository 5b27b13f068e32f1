"""run_with_cache and ActivationCache: equal to the hooks, residual stream helpers add up, per-head
results from z and W_O, apply_ln_to_stack, logit lens, gradients at hook points, token strings,
and one-line errors where a model lacks what a helper needs."""

import pytest
import torch

from conftest import tiny_transformer
from dlmlab.interp.activation_cache import ActivationCache, MissingActivation, to_str_tokens
from dlmlab.analysis.fold import fold_ln
from dlmlab.errors import UserError
from dlmlab.interp.hooks import UnknownHookPoint
from dlmlab.models.mamba import Mamba, MambaConfig
from dlmlab.models.mamba2 import Mamba2, Mamba2Config
from dlmlab.models.recurrent import RecurrentConfig, RecurrentModel

ATOL = 1e-5


def mamba():
    torch.manual_seed(0)
    return Mamba(MambaConfig(vocab_size=23, d_model=16, n_layers=2, d_state=4, scan="chunked")).eval()


def mamba2():
    torch.manual_seed(0)
    return Mamba2(Mamba2Config(vocab_size=23, d_model=16, n_layers=2, d_state=4, headdim=8)).eval()


def rnn(cell="lstm", **kw):
    torch.manual_seed(0)
    return RecurrentModel(RecurrentConfig(cell=cell, vocab_size=23, d_model=8, n_layers=2, **kw)).eval()


def test_run_with_cache_equals_the_cache_hooks(tokens):
    model = tiny_transformer()
    with torch.no_grad():
        with model.cache() as want:
            want_logits = model(tokens)
        logits, cache = model.run_with_cache(tokens)
    assert isinstance(cache, ActivationCache) and torch.allclose(logits, want_logits, atol=ATOL)
    assert set(cache) == set(want) and len(cache) == len(want)
    # the attention patterns are deferred: listed, computed on the first read (the forward kept SDPA)
    assert cache.deferred == ["blocks.0.attn.pattern", "blocks.1.attn.pattern"]
    for name, value in want.items():
        assert torch.allclose(cache[name], value, atol=ATOL), name
    assert cache.deferred == [] and torch.equal(cache["blocks.1.attn.pattern"], want["blocks.1.attn.pattern"])
    assert "blocks.0.attn.head_out" not in cache  # opt-in
    assert not any(hp.active for hp in model.hook_points.values())
    # (name, layer) keys, TransformerLens style
    assert cache["resid_post", 1] is cache["blocks.1.resid_post"]
    assert cache["pattern", -1] is cache["blocks.1.attn.pattern"]
    assert ("pattern", 0) in cache and ("head_out", 0) not in cache


def test_deferred_patterns_are_recorded_when_named_or_refused_when_stale(tokens):
    model = tiny_transformer(positions="rope", attn_mask="bidirectional")
    with torch.no_grad():
        _, named = model.run_with_cache(tokens, ["blocks.*.attn.pattern"], attn_mask="causal")
        assert named.deferred == []
        _, cache = model.run_with_cache(tokens, attn_mask="causal")
        assert torch.equal(cache["pattern", 0], named["pattern", 0])  # the same forward keywords replayed
        # hooks attached during the run: recorded in that forward (the replay could not see them)
        with model.replace({"blocks.0.attn.z": torch.zeros(3, 12, 4, 8)}):
            _, patched = model.run_with_cache(tokens)
        assert patched.deferred == []
        _, stale = model.run_with_cache(tokens)
        with model.add({"final": torch.ones(32)}), pytest.raises(UserError, match="hooks are attached"):
            stale["pattern", 0]
        model.blocks[0].attn.W_q.weight.mul_(2)
        with pytest.raises(UserError, match="model changed"):
            stale["pattern", 0]


def test_run_with_cache_names_kwargs_and_step(tokens):
    model = tiny_transformer(attn_mask="bidirectional")
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens, ["blocks.*.attn.head_out", "final"], attn_mask="causal", step=4)
        assert torch.allclose(logits, model(tokens, attn_mask="causal"), atol=ATOL)
    assert sorted(cache) == ["blocks.0.attn.head_out", "blocks.1.attn.head_out", "final"]
    assert cache.step == 4 and cache.meta["forward_kwargs"] == ["attn_mask"]
    assert not cache["final"].requires_grad
    _, kept = model.run_with_cache(tokens, "final", detach=False)
    assert kept["final"].requires_grad
    with pytest.raises(UnknownHookPoint, match="blocks.7"):
        model.run_with_cache(tokens, ["blocks.7.resid_post"])
    with pytest.raises(MissingActivation, match="run_with_cache"):
        cache["blocks.0.resid_pre"]
    with pytest.raises(MissingActivation, match="does not have"):
        cache["blocks.0.mixer.dt"]


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_accumulated_resid(norm, tokens):
    model = tiny_transformer(norm=norm)
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
    acc, labels = cache.accumulated_resid(return_labels=True)
    assert acc.shape == (3, 3, 12, 32)
    assert labels == ["blocks.0.resid_pre", "blocks.1.resid_pre", "blocks.1.resid_post"]
    with torch.no_grad():
        assert torch.allclose(model.ln_final(acc[-1]), cache["final"], atol=ATOL)
    normed = cache.accumulated_resid(apply_ln=True)
    assert torch.allclose(normed[-1], cache["final"], atol=ATOL)
    assert torch.equal(cache.accumulated_resid(layer=1), acc[:2])
    mid, mid_labels = cache.accumulated_resid(incl_mid=True, return_labels=True)
    assert mid.shape[0] == 5 and mid_labels[1] == "blocks.0.resid_mid"


def test_decompose_resid_sums_to_the_stream(tokens):
    model = tiny_transformer()
    embed_add = 0.1 * torch.randn(3, 12, 32)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, embed_add=embed_add)
    parts, labels = cache.decompose_resid(return_labels=True)
    assert labels == ["embed", "pos_embed", "embed_add", "blocks.0.mixer_out", "blocks.0.mlp_out",
                      "blocks.1.mixer_out", "blocks.1.mlp_out"]
    assert torch.allclose(parts.sum(0), cache["blocks.1.resid_post"], atol=ATOL)
    assert torch.allclose(parts[2], embed_add, atol=ATOL)
    assert torch.allclose(cache.decompose_resid(layer=1).sum(0), cache["blocks.1.resid_pre"], atol=ATOL)
    assert torch.allclose(cache.decompose_resid(layer=1, mlp_input=True).sum(0), cache["blocks.1.resid_mid"], atol=ATOL)
    mixers = cache.decompose_resid(mode="mixer", incl_embeds=False, return_labels=True)[1]
    assert mixers == ["blocks.0.mixer_out", "blocks.1.mixer_out"]
    with pytest.raises(UserError, match="mode"):
        cache.decompose_resid(mode="heads")


@pytest.mark.parametrize("make", [mamba, mamba2, lambda: rnn("gru", residual=True)], ids=["mamba", "mamba2", "gru"])
def test_decompose_and_lens_on_non_attention_models(make, tokens):
    model = make()
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
    parts, labels = cache.decompose_resid(return_labels=True)
    assert labels == ["embed", "blocks.0.mixer_out", "blocks.1.mixer_out"]
    assert torch.allclose(parts.sum(0), cache["blocks.1.resid_post"], atol=ATOL)
    assert torch.allclose(cache.logit_lens().logits[-1], logits, atol=ATOL)
    with pytest.raises(UserError, match="needs attention heads.*decompose_resid"):
        cache.stack_head_results()


def test_plain_lstm_has_no_residual_stream(tokens):
    model = rnn("lstm")
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    for helper in (cache.accumulated_resid, cache.decompose_resid, cache.logit_lens):
        with pytest.raises(UserError, match="needs a residual stream"):
            helper()


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_stacked_head_results_sum_to_the_attention_output(positions, tokens):
    model = tiny_transformer(positions=positions)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
        _, heads = model.run_with_cache(tokens, "blocks.*.attn.head_out")
    stack, labels = cache.stack_head_results(return_labels=True)
    assert stack.shape == (8, 3, 12, 32) and labels[:5] == ["L0H0", "L0H1", "L0H2", "L0H3", "L1H0"]
    for i in range(2):
        b_O = model.blocks[i].attn.W_o.bias
        assert torch.allclose(stack[4 * i:4 * i + 4].sum(0) + b_O, cache[f"blocks.{i}.mixer_out"], atol=ATOL)
        # the same per-head outputs the opt-in hook point builds
        assert torch.allclose(stack[4 * i:4 * i + 4], heads[f"blocks.{i}.attn.head_out"].permute(2, 0, 1, 3), atol=ATOL)
    assert cache.stack_head_results(layer=1).shape == (4, 3, 12, 32)
    _, no_z = model.run_with_cache(tokens, ["embed", "blocks.*.resid_*"])
    with pytest.raises(MissingActivation, match="stack_head_results needs 'blocks.0.attn.z'"):
        no_z.stack_head_results()


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_apply_ln_to_stack_reproduces_the_norm_and_logits(norm, tokens):
    model = tiny_transformer(norm=norm)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    # unfolded, TransformerLens's convention: the parts sum to the norm's output before its weight and bias
    # (its "normalized" point); weighted=True: the parts times the weight, plus the bias, give the norm's output
    bias = model.ln_final.bias if norm == "layernorm" else 0
    parts = cache.apply_ln_to_stack(cache.decompose_resid())
    assert torch.allclose(parts.sum(0), cache["ln_final.hook_normalized"], atol=ATOL)
    assert torch.allclose(parts.sum(0) * model.ln_final.weight + bias, cache["final"], atol=ATOL)
    weighted = cache.apply_ln_to_stack(cache.decompose_resid(), weighted=True)
    assert torch.allclose(weighted.sum(0) + bias, cache["final"], atol=ATOL)
    assert not torch.allclose(weighted, parts, atol=1e-2)              # the weight is not 1: the two differ
    assert torch.allclose(cache.decompose_resid(apply_ln=True), parts)
    # at a block's norm (with the scale of that block's cached input)
    with torch.no_grad():
        ln1 = model.blocks[1].ln1(cache["blocks.1.resid_pre"])
    bias1 = model.blocks[1].ln1.bias if norm == "layernorm" else 0
    at_1 = cache.apply_ln_to_stack(cache.decompose_resid(layer=1), layer=1, weighted=True)
    assert torch.allclose(at_1.sum(0) + bias1, ln1, atol=ATOL)
    at_1 = cache.apply_ln_to_stack(cache.decompose_resid(layer=1), layer=1)
    assert torch.allclose(at_1.sum(0), cache["blocks.1.ln1.hook_normalized"], atol=ATOL)
    # folded (TransformerLens's setting): parts @ W_U (+ b_U) sum to the logits; heads + the rest too
    folded = fold_ln(model)
    with torch.no_grad():
        logits, fc = folded.run_with_cache(tokens)
        full = fc.apply_ln_to_stack(fc.decompose_resid())
        assert torch.allclose(folded.unembed(full.sum(0)), logits, atol=1e-4)
        heads = fc.stack_head_results(apply_ln=True)
        mixers = fc.apply_ln_to_stack(fc.decompose_resid(mode="mixer", incl_embeds=False))
        rest = fc.decompose_resid(apply_ln=True).sum(0) - mixers.sum(0)
        b_O = sum(fc.apply_ln_to_stack(folded.blocks[i].attn.W_o.bias.expand(1, 3, 12, 32)) for i in range(2))[0]
        assert torch.allclose(folded.unembed(heads.sum(0) + b_O + rest), logits, atol=1e-4)
    with pytest.raises(UserError, match="wants a stack"):
        cache.apply_ln_to_stack(torch.zeros(2, 32))


def test_logit_lens_last_layer_is_the_models_logits(tokens):
    model = tiny_transformer()
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
    lens = cache.logit_lens()
    assert lens.logits.shape == (3, 3, 12, 23) and lens.labels[-1] == "blocks.1.resid_post"
    assert torch.allclose(lens.logits[-1], logits, atol=ATOL)
    probs, ids = lens.top(3)
    assert ids.shape == (3, 3, 12, 3) and torch.equal(ids[-1, ..., 0], logits.argmax(-1))
    assert (lens.rank(logits.argmax(-1))[-1] == 0).all()
    assert cache.logit_lens(positions=[-1]).logits.shape == (3, 3, 1, 23)


def autograd_at(model, tokens, names, loss_fn) -> dict:
    """The reference: d loss / d activation at each hook point, by retain_grad through a manual hook."""
    seen = {}

    def keep(x, hp):
        if not x.requires_grad:
            x = x.detach().requires_grad_(True)
        x.retain_grad()
        seen[hp.name] = x
        return x

    with model.hooks({n: keep for n in names}):
        loss_fn(model(tokens)).backward()
    return {n: x.grad for n, x in seen.items()}


@pytest.mark.parametrize("frozen", [False, True])
def test_grads_at_hook_points_equal_autograd(frozen, tokens):
    model = tiny_transformer()
    model.requires_grad_(not frozen)
    names = ["embed", "blocks.0.resid_post", "blocks.1.resid_pre", "blocks.1.attn.pattern", "blocks.1.mixer_out"]

    def loss_fn(logits):
        return logits[:, -1].log_softmax(-1)[:, 3].sum()

    logits, cache = model.run_with_cache(tokens, names, loss_fn=loss_fn)
    assert set(cache.grads) == set(names) and not logits.requires_grad
    assert all(p.grad is None for p in model.parameters())  # parameters' .grad left alone
    seen = autograd_at(model, tokens, names, loss_fn)
    for n in names:
        assert torch.allclose(cache.grads[n], seen[n], atol=1e-6), n
    assert torch.equal(cache.grads["blocks.0.resid_post"], cache.grads["blocks.1.resid_pre"])
    model.zero_grad(set_to_none=True)
    # gradients for a subset only
    _, some = model.run_with_cache(tokens, ["final"], loss_fn=loss_fn, grad_names=["embed"])
    assert sorted(some) == ["final"] and sorted(some.grads) == ["embed"]
    with torch.no_grad(), pytest.raises(UserError, match="grad mode"):
        model.run_with_cache(tokens, loss_fn=loss_fn)
    with pytest.raises(UserError, match="scalar"):
        model.run_with_cache(tokens, "final", loss_fn=lambda l: l)


def test_grads_on_a_mamba(tokens):
    model = mamba()

    def loss_fn(logits):
        return logits[:, -1, 0].sum()

    _, cache = model.run_with_cache(tokens, "blocks.*.resid_pre", loss_fn=loss_fn)
    assert cache.grads["blocks.1.resid_pre"].shape == (3, 12, 16)
    model.zero_grad(set_to_none=True)
    seen = autograd_at(model, tokens, ["blocks.0.resid_pre", "blocks.1.resid_pre"], loss_fn)
    for n, g in seen.items():
        assert torch.allclose(cache.grads[n], g, atol=1e-6) and g[:, -1].abs().sum() > 0, n


def test_to_str_tokens():
    from dlmlab.data.tokenizer import BPETokenizer, CharTokenizer

    char = CharTokenizer.train("hello world")
    ids = torch.tensor(char.encode("hold"))
    assert to_str_tokens(char, ids) == ["h", "o", "l", "d"]
    assert to_str_tokens(char, ids.expand(2, -1)) == [["h", "o", "l", "d"]] * 2
    assert to_str_tokens(char, "he") == ["h", "e"]
    bpe = BPETokenizer.train("the cat sat on the mat. " * 30, vocab_size=300)
    text = "the cat sat"
    pieces = to_str_tokens(bpe, bpe.encode(text))
    assert "".join(pieces) == text and len(pieces) == len(bpe.encode(text))
    with pytest.raises(UserError, match="shape"):
        to_str_tokens(char, torch.zeros(1, 2, 3, dtype=torch.long))


def test_run_with_cache_on_a_wrapped_hugging_face_model():
    transformers = pytest.importorskip("transformers")
    from dlmlab.models.hf_hooked import HFHooked

    torch.manual_seed(0)
    cfg = transformers.GPTNeoXConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64)
    model = HFHooked(transformers.GPTNeoXForCausalLM(cfg).eval())
    x = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits, cache = model.run_with_cache(x)
        assert torch.allclose(logits, model(x), atol=ATOL)
    parts, labels = cache.decompose_resid(return_labels=True)  # parallel attention + MLP: both read resid_pre
    assert labels == ["embed", "blocks.0.mixer_out", "blocks.0.mlp_out", "blocks.1.mixer_out", "blocks.1.mlp_out"]
    assert torch.allclose(parts.sum(0), cache["blocks.1.resid_post"], atol=ATOL)
    with pytest.raises(UserError, match="attention heads"):
        cache.stack_head_results()
    _, g = model.run_with_cache(x, "blocks.*.resid_pre", loss_fn=lambda l: l[:, -1].logsumexp(-1).sum())
    assert g.grads["blocks.1.resid_pre"].shape == (2, 10, 32)


def test_logit_attrs_sum_to_the_logit(tokens):
    folded = fold_ln(tiny_transformer())
    with torch.no_grad():
        logits, cache = folded.run_with_cache(tokens)
    target, other = tokens.roll(-1, 1), torch.zeros_like(tokens)
    attrs = cache.logit_attrs(cache.decompose_resid(), target)
    assert attrs.shape == (6, 3, 12)
    b_U = folded.unembed.bias if folded.unembed.bias is not None else torch.zeros(23)
    want = logits.gather(-1, target[..., None])[..., 0]
    assert torch.allclose(attrs.sum(0) + b_U[target], want, atol=1e-4)
    diff = cache.logit_attrs(cache.decompose_resid(), target, other).sum(0) + b_U[target] - b_U[other]
    assert torch.allclose(diff, want - logits[..., 0], atol=1e-4)
    # unfolded: weighted=True applies the norm's weight, so the parts plus the images of the norm's and the
    # unembedding's biases sum to the logit; the default (TransformerLens's) leaves the weight out
    model = tiny_transformer()
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens)
    want = logits.gather(-1, target[..., None])[..., 0]
    W = model.unembed.weight[target]
    attrs = cache.logit_attrs(cache.decompose_resid(), target, weighted=True)
    assert torch.allclose(attrs.sum(0) + (W * model.ln_final.bias).sum(-1), want, atol=1e-4)
    plain = cache.logit_attrs(cache.decompose_resid(), target)
    assert torch.allclose(plain.sum(0), (cache["ln_final.hook_normalized"] * W).sum(-1), atol=1e-4)
