"""TransformerLens idioms on dlmlab models: run_with_cache(names_filter=...), run_with_hooks(fwd_hooks=...,
bwd_hooks=...), TransformerLens hook names, to_tokens / to_str_tokens / to_string with the attached
tokenizer, and the weight views W_E, W_U, W_Q ... with TransformerLens's shapes.

The weight views are checked against a float64 plain-loop reference of TransformerLens's documented
conventions (``q[h] = ln1(resid_pre) @ W_Q[l, h] + b_Q[l, h]`` ...) on every run.  The last test builds
TransformerLens's own HookedTransformer from the views and compares logits, caches and hooked runs: TransformerLens
3.9 (the last release with HookedTransformer) is the ``tl`` extra, in the lock, so `make setup` and CI install it
and the test runs there (it fails, not skips, when TransformerLens is missing).
"""

from __future__ import annotations

import pytest
import torch

from dlmlab.data.tokenizer import CharTokenizer
from dlmlab.errors import UserError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.models.factory import build_model
from dlmlab.interp.tl_names import from_tl_name, to_tl_name
from tl_util import tl_twin

V = 11


def _tf(**kw) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(vocab_size=V, d_model=16, n_layers=2, n_heads=4, d_mlp=32, max_seq_len=8, attn_mask="causal",
               positions="learned", tie_embeddings=False, init_std=0.3)
    cfg.update(kw)
    return Transformer(TransformerConfig(**cfg)).eval()


def _tokens(B=3, T=8, seed=1) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_tl_names_map_to_dlmlab_names():
    assert from_tl_name("blocks.0.attn.hook_pattern") == "blocks.0.attn.pattern"
    assert from_tl_name("blocks.*.hook_resid_post") == "blocks.*.resid_post"
    assert from_tl_name("hook_embed") == "embed"
    assert from_tl_name("blocks.1.attn.hook_result") == "blocks.1.attn.head_out"
    assert from_tl_name("ln_final.hook_normalized") == "ln_final.normalized"
    assert from_tl_name("blocks.0.ln2.hook_scale") == "blocks.0.ln2.scale"
    for ours in ("embed", "blocks.1.attn.head_out", "blocks.0.attn.z", "ln_final.normalized", "blocks.1.mlp.post"):
        assert from_tl_name(to_tl_name(ours)) == ours
    assert to_tl_name("blocks.0.attn.head_out") == "blocks.0.attn.hook_result"
    assert [to_tl_name(n) for n in ("final", "logits", "blocks.0.mixer_out", "blocks.0.mixer.dt")] == [None] * 4
    assert from_tl_name("blocks.1.mlp.hook_post") == "blocks.1.mlp.post"
    assert from_tl_name("blocks.0.resid_pre") == "blocks.0.resid_pre"


def test_run_with_cache_names_filter_forms():
    m, x = _tf(), _tokens()
    _, c_list = m.run_with_cache(x, names_filter=["blocks.0.attn.hook_pattern", "blocks.1.resid_post"])
    assert set(c_list) == {"blocks.0.attn.pattern", "blocks.1.resid_post"}
    _, c_str = m.run_with_cache(x, names_filter="blocks.1.hook_resid_post")
    assert list(c_str) == ["blocks.1.resid_post"]
    # TL spelling reads too (the pattern in c_list forced the explicit attention path: allclose)
    assert torch.allclose(c_str["blocks.1.hook_resid_post"], c_list["blocks.1.resid_post"], atol=1e-5)
    _, c_pred = m.run_with_cache(x, names_filter=lambda n: n.endswith("pattern"))
    assert set(c_pred) == {"blocks.0.attn.pattern", "blocks.1.attn.pattern"}
    assert torch.equal(c_pred["pattern", 0], c_list["blocks.0.attn.pattern"])
    with pytest.raises(UserError, match="both names and names_filter"):
        m.run_with_cache(x, ["embed"], names_filter=["embed"])


def test_run_with_hooks_forward_and_backward():
    m, x = _tf(), _tokens()
    seen = []

    def zero_head(z, hook):
        seen.append(hook.name)
        z = z.clone()
        z[:, :, 1] = 0
        return z

    ablated = m.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_z", zero_head)])
    assert seen == ["blocks.0.attn.hook_z"]                               # the name it was registered by
    with m.replace({"blocks.0.attn.z": lambda z: zero_head(z, type("H", (), {"name": "x"}))}):
        expected = m(x)
    assert torch.allclose(ablated, expected)
    assert not any(h.active for h in m.hook_points.values())          # removed afterwards
    assert not torch.allclose(ablated, m(x))
    # predicate names, as TransformerLens allows
    names = []
    m.run_with_hooks(x, fwd_hooks=[(lambda n: n.endswith("resid_post"), lambda a, hook: names.append(hook.name))])
    assert names == ["blocks.0.resid_post", "blocks.1.resid_post"]
    # backward hooks: the gradient at the point, as run_with_cache(loss_fn=...) computes it
    grads = {}
    logits = m.run_with_hooks(x, bwd_hooks=[("blocks.0.hook_resid_post", lambda g, hook: grads.update({hook.name: g}))])
    logits[:, -1, 3].sum().backward()
    _, c = m.run_with_cache(x, ["blocks.0.resid_post"], loss_fn=lambda lg: lg[:, -1, 3].sum())
    assert torch.allclose(grads["blocks.0.hook_resid_post"], c.grads["blocks.0.resid_post"], atol=1e-6)
    with pytest.raises(UserError, match=r"\(name, fn\) pairs"):
        m.run_with_hooks(x, fwd_hooks=["embed"])


def test_text_helpers_with_attached_tokenizer():
    tok = CharTokenizer.train("abcdefghijk")
    m = _tf()
    with pytest.raises(UserError, match="needs a tokenizer"):
        m.to_tokens("abc")
    m.tokenizer = tok
    ids = m.to_tokens("abcab")
    assert ids.shape == (1, 5) and ids.dtype == torch.long and ids[0].tolist() == tok.encode("abcab")
    assert m.to_tokens(["ab", "cd"]).shape == (2, 2)
    assert m.to_str_tokens("abc") == ["a", "b", "c"]
    assert m.to_str_tokens(ids) == [["a", "b", "c", "a", "b"]]
    assert m.to_string(ids[0]) == "abcab" and m.to_string(ids) == ["abcab"]
    with pytest.raises(UserError, match="one length"):
        m.to_tokens(["ab", "abc"])
    with pytest.raises(UserError, match="BOS"):
        m.to_tokens("ab", prepend_bos=True)


def test_load_attaches_the_tokenizer(tmp_path):
    import dlmlab
    from dlmlab.objectives import ARObjective
    from dlmlab.training import TrainConfig, train

    tok = CharTokenizer.train("abcdefghijk")
    m = _tf()
    train(m, TrainConfig(steps=1, batch_size=2, progress=False),
          lambda step, gen: torch.randint(0, V, (2, 8), generator=gen), ARObjective(), out_dir=tmp_path / "run",
          tokenizer=tok)
    run = dlmlab.load(tmp_path / "run")
    assert run.model.tokenizer is run.tokenizer
    assert run.model.to_string(run.model.to_tokens("hijk")[0]) == "hijk"


def _ln64(x, ln):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + ln.eps) * ln.weight.double() + ln.bias.double()


def test_weight_views_shapes_and_plain_loop_reference():
    """TransformerLens's conventions, by a float64 loop over heads: q/k/v/z/attn_out/mlp from the views."""
    m, x = _tf(), _tokens(B=2)
    L, H, D, dh, M = 2, 4, 16, 4, 32
    assert m.W_E.shape == (V, D) and m.W_U.shape == (D, V) and m.b_U.shape == (V,) and m.W_pos.shape == (8, D)
    for name in ("W_Q", "W_K", "W_V"):
        assert getattr(m, name).shape == (L, H, D, dh)
    assert m.W_O.shape == (L, H, dh, D) and m.b_Q.shape == (L, H, dh) and m.b_O.shape == (L, D)
    assert m.W_in.shape == (L, D, M) and m.W_out.shape == (L, M, D) and m.b_in.shape == (L, M)
    assert m.b_out.shape == (L, D)
    m64 = m.double()
    _, cache = m64.run_with_cache(x, names_filter=lambda n: True)
    assert torch.equal(cache["embed"], m64.W_E[x])
    for layer in range(L):
        blk = m64.blocks[layer]
        resid = cache["resid_pre", layer]
        normed = _ln64(resid, blk.ln1)
        T = x.shape[1]
        z = torch.zeros(2, T, H, dh, dtype=torch.float64)
        for h in range(H):
            q = normed @ m64.W_Q[layer, h] + m64.b_Q[layer, h]
            k = normed @ m64.W_K[layer, h] + m64.b_K[layer, h]
            v = normed @ m64.W_V[layer, h] + m64.b_V[layer, h]
            assert torch.allclose(q, cache["q", layer][:, :, h], atol=1e-12)
            assert torch.allclose(k, cache["k", layer][:, :, h], atol=1e-12)
            scores = q @ k.transpose(-1, -2) / dh**0.5
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            pattern = scores.softmax(-1)
            assert torch.allclose(pattern, cache["pattern", layer][:, h], atol=1e-12)
            z[:, :, h] = pattern @ v
        assert torch.allclose(z, cache["z", layer], atol=1e-12)
        attn_out = sum(z[:, :, h] @ m64.W_O[layer, h] for h in range(H)) + m64.b_O[layer]
        assert torch.allclose(attn_out, cache["attn_out", layer], atol=1e-12)
        mid = _ln64(cache["resid_mid", layer], blk.ln2)
        post = torch.nn.functional.gelu(mid @ m64.W_in[layer] + m64.b_in[layer], approximate="tanh")
        assert torch.allclose(post, cache["blocks.%d.mlp.hook_post" % layer], atol=1e-12)
        assert torch.allclose(post @ m64.W_out[layer] + m64.b_out[layer], cache["mlp_out", layer], atol=1e-12)
    logits = cache["final"] @ m64.W_U + m64.b_U
    assert torch.allclose(logits, cache["logits"], atol=1e-12)


def test_weight_views_refuse_what_a_model_lacks():
    rope = _tf(positions="rope", d_mlp=0, mlp="gelu")
    with pytest.raises(UserError, match="no W_pos"):
        rope.W_pos
    with pytest.raises(UserError, match="attention-only"):
        rope.W_in
    with pytest.raises(UserError, match="not gated"):
        _tf().W_gate
    assert _tf(mlp="swiglu").W_gate.shape == (2, 16, 32)
    assert _tf(bias=False).b_Q.abs().sum() == 0
    mamba = build_model("mamba", vocab_size=V, n_out=V, d_model=16, n_layers=1)
    assert mamba.W_E.shape == (V, 16) and mamba.W_U.shape == (16, V)
    assert not hasattr(mamba, "W_Q")                                   # attention views on attention models only
    _, c = mamba.run_with_cache(_tokens(), names_filter="blocks.0.hook_resid_post")
    assert list(c) == ["blocks.0.resid_post"]


@pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated:DeprecationWarning")
@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_against_transformer_lens_on_identical_weights(positions):
    """A HookedTransformer given dlmlab's weight views computes the same logits, activations and hooked runs
    (learned positions, and rotary ones: TransformerLens's default rotary convention is dlmlab's)."""
    m, x = _tf(positions=positions).double(), _tokens()
    ref = tl_twin(m)
    with torch.no_grad():
        tl_logits, tl_cache = ref.run_with_cache(x)
        logits, cache = m.run_with_cache(x, names_filter=lambda n: True)
    assert torch.allclose(logits, tl_logits, atol=1e-10)
    names = ["hook_embed"] + (["hook_pos_embed"] if positions == "learned" else [])
    for name in names + ["blocks.0.hook_resid_pre", "blocks.1.attn.hook_q",
                 "blocks.1.attn.hook_k", "blocks.1.attn.hook_v", "blocks.0.attn.hook_pattern", "blocks.1.attn.hook_z",
                 "blocks.1.hook_attn_out", "blocks.0.hook_resid_mid", "blocks.1.mlp.hook_post",
                 "blocks.1.hook_mlp_out", "blocks.1.hook_resid_post", "ln_final.hook_normalized",
                 "ln_final.hook_scale", "blocks.0.ln1.hook_scale", "blocks.1.ln2.hook_normalized"]:
        assert torch.allclose(cache[name], tl_cache[name], atol=1e-10), name
    assert torch.allclose(cache.stack_head_results(), tl_cache.stack_head_results(), atol=1e-10)
    views = ["W_E", "W_U", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_in", "b_in", "W_out", "b_out"]
    for name in views + (["W_pos"] if positions == "learned" else []):
        assert getattr(m, name).shape == getattr(ref, name).shape, name
        assert torch.allclose(getattr(m, name), getattr(ref, name)), name

    def ablate(z, hook):
        z = z.clone()
        z[:, :, 2] = 0.0
        return z

    with torch.no_grad():
        ours = m.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_z", ablate)])
        theirs = ref.run_with_hooks(x, fwd_hooks=[("blocks.0.attn.hook_z", ablate)])
    assert torch.allclose(ours, theirs, atol=1e-10)
