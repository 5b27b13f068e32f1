"""The TransformerLens snippet set of docs/foundation.md runs unchanged on a dlmlab Transformer and gives what
TransformerLens's HookedTransformer gives on the same weights, with every weight (norm weights and biases too)
moved away from its initial value; and the TransformerLens conveniences that need a dlmlab-only check
(``to_single_token`` and ``to_tokens`` with the mask, ``return_type="loss"`` of a diffusion model, errors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from dlmlab.data.tokenizer import CharTokenizer
from dlmlab.errors import UserError
from dlmlab.interp import UnknownHookPoint
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives import ARObjective, MaskedDiffusionObjective
from tl_util import tl_twin

V = 11
DOCS = Path(__file__).resolve().parents[1] / "docs" / "foundation.md"


def _perturbed(norm: str = "layernorm", **kw) -> Transformer:
    """A float64 Transformer whose every parameter is moved off its initial value (norm weights off 1, biases off 0)."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=V, d_model=16, n_layers=2, n_heads=4, d_mlp=32, max_seq_len=8, attn_mask="causal",
               positions="learned", tie_embeddings=False, init_std=0.3, norm=norm)
    cfg.update(kw)
    m = Transformer(TransformerConfig(**cfg)).double().eval()
    init = {n: p.detach().clone() for n, p in m.named_parameters()}
    with torch.no_grad():
        for p in m.parameters():
            p.add_((0.4 if p.dim() == 1 else 0.1) * torch.randn_like(p))
    for n, p in m.named_parameters():
        assert (p - init[n]).abs().min() > 0 and (p - init[n]).abs().max() > 0.05, n
    return m


def _tokens(B=3, T=8) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))


def snippet_code() -> str:
    text = DOCS.read_text(encoding="utf-8")
    m = re.search(r"<!-- tl-snippets -->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/foundation.md lost its <!-- tl-snippets --> block"
    return m.group(1)


def _run(model, tokens) -> dict:
    scope = {"model": model, "tokens": tokens}
    with torch.no_grad():
        exec(compile(snippet_code(), str(DOCS), "exec"), scope)
    return scope["out"]


def _same(a, b, key: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape, (key, getattr(b, "shape", b), a.shape)
        assert torch.allclose(a, b.to(a.dtype), atol=1e-10, rtol=0), (key, (a - b).abs().max().item())
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), key
        for x, y in zip(a, b):
            _same(x, y, key)
    else:
        assert a == b, (key, a, b)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("norm,positions", [("layernorm", "learned"), ("rmsnorm", "rope")])
def test_the_documented_snippets_match_transformer_lens_on_perturbed_weights(norm, positions):
    m, x = _perturbed(norm, positions=positions), _tokens()
    ref = tl_twin(m)
    ours, theirs = _run(m, x), _run(ref, x)
    assert list(ours) == list(theirs) and len(ours) == 33
    for key in ours:
        _same(theirs[key], ours[key], key)
    # the entries that were wrong before (norm weights and biases mattered) are far from the weighted versions
    _, cache = m.run_with_cache(x)
    assert (cache["final"] - ours["ln_final.hook_normalized"]).abs().max() > 0.1
    assert ours["hook_names"] == [("blocks.0.attn.hook_pattern", 0), ("blocks.1.attn.hook_pattern", 1)]
    assert not any(h.active for h in m.hook_points.values())          # reset_hooks / hooks() left nothing behind


def test_hooked_norm_points_equal_the_derived_ones_and_the_norm():
    """Hooking a norm's scale / normalized runs its explicit path; the values equal the ones a default cache derives."""
    m, x = _perturbed(), _tokens()
    with torch.no_grad():
        _, named = m.run_with_cache(x, names_filter=lambda n: "ln" in n or n == "final")
        _, default = m.run_with_cache(x)
    assert "ln_final.normalized" in named and "ln_final.normalized" not in default    # opt-in: derived on read
    for name in ("ln_final.hook_normalized", "ln_final.hook_scale", "blocks.0.ln2.hook_normalized"):
        assert torch.allclose(named[name], default[name], atol=1e-12), name
    ln = m.ln_final
    assert torch.allclose(named["ln_final.normalized"] * ln.weight + ln.bias, named["final"], atol=1e-12)


def test_a_names_filter_asking_for_patterns_records_them_in_the_first_forward():
    m, x = _perturbed(), _tokens()
    with torch.no_grad():
        _, lazy = m.run_with_cache(x)
        _, eager = m.run_with_cache(x, names_filter=lambda n: n.endswith("hook_pattern") or "resid" in n)
    assert lazy.deferred and eager.deferred == []
    assert torch.allclose(eager["pattern", 1], lazy["pattern", 1], atol=1e-12)


def test_filters_predicates_and_globs_that_match_nothing_are_errors():
    m, x = _perturbed(), _tokens()
    with pytest.raises(UnknownHookPoint, match=r"true for none .*closest point names: 'hook_z'"):
        m.run_with_cache(x, names_filter=lambda n: n.endswith("hook_zz"))
    with pytest.raises(UnknownHookPoint, match=r"true for none"):
        m.run_with_hooks(x, fwd_hooks=[(lambda n: n.startswith("nothing"), lambda a, hook: None)])
    with pytest.raises(UnknownHookPoint, match=r"did you mean 'blocks\.\*\.attn\.z'"):
        m.run_with_cache(x, names_filter="blocks.*.attn.hook_zz")
    with pytest.raises(UnknownHookPoint):
        m.add_hook("blocks.0.hook_resid_prr", lambda a, hook: None)
    assert not any(h.active for h in m.hook_points.values())
    with pytest.raises(UserError, match="has no layer"):
        m.run_with_hooks(x, fwd_hooks=[("hook_embed", lambda a, hook: hook.layer())])


def test_add_hook_permanent_and_bwd():
    m, x = _perturbed(), _tokens()
    with torch.no_grad():
        plain = m(x)
        m.add_hook("blocks.0.hook_resid_post", lambda a, hook: a * 0, is_permanent=True)
        m.add_hook("blocks.1.hook_resid_post", lambda a, hook: a * 2)
        m.reset_hooks()
        assert m.hook_points["blocks.0.resid_post"].active and not m.hook_points["blocks.1.resid_post"].active
        m.reset_hooks(including_permanent=True)
        assert torch.equal(m(x), plain)
    grads = []

    def count(g, hook):
        grads.append(hook.name)
        hook.ctx["calls"] = hook.ctx.get("calls", 0) + 1               # TransformerLens's hook.ctx

    m.add_hook(lambda n: n.endswith("hook_resid_pre"), count, dir="bwd")
    m(x).sum().backward()
    assert m.hook_points["blocks.1.resid_pre"].ctx == {"calls": 1}
    m.reset_hooks()
    assert sorted(grads) == ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre"]
    assert m.hook_points["blocks.1.resid_pre"].ctx == {}
    with pytest.raises(UserError, match="dir must be"):
        m.add_hook("embed", lambda a, hook: None, dir="up")
    with torch.no_grad():                                          # hooks(): add_hook inside is reset at the end
        with m.hooks(fwd_hooks=[("blocks.0.hook_resid_post", lambda a, hook: a * 0)]) as same:
            m.add_hook("blocks.1.hook_resid_post", lambda a, hook: a * 2)
            hooked = same(x)
        with m.hooks({"blocks.0.resid_post": lambda a, hook: a * 0}):
            m.add_hook("blocks.1.hook_resid_post", lambda a, hook: a * 2)
        assert same is m and not torch.allclose(hooked, plain) and torch.equal(m(x), plain)


def test_return_type_loss_of_a_diffusion_model_is_its_objectives_nelbo():
    m = _perturbed(attn_mask="bidirectional", vocab_size=V + 1)
    x, obj = _tokens(), MaskedDiffusionObjective(mask_id=V)
    with pytest.raises(UserError, match="needs its objective"):
        m(x, return_type="loss")
    with torch.no_grad():
        want = obj.loss(m, obj.make_batch(x, torch.Generator().manual_seed(0)))[0]
        got = m(x, return_type="loss", objective=obj)
        m.objective = obj
        logits, again = m(x, return_type="both")
        other_seed = m(x, return_type="loss", loss_seed=1)
        hooked = m.run_with_hooks(x, return_type="loss", fwd_hooks=[("blocks.0.attn.hook_z", lambda z, hook: z * 0)])
        # "both" returns the logits of the loss's forward: on the tokens masked where the draw's uniform < t
        # (the linear schedule's mask rate)
        b = obj.make_batch(x, torch.Generator().manual_seed(0))
        corrupted = m(torch.where(b["noise"] < b["t"][:, None], V, x))
    assert torch.equal(got, want) and torch.equal(again, want) and logits.shape == (3, 8, V + 1)
    assert not torch.equal(other_seed, want) and not torch.allclose(hooked, want)
    assert torch.equal(logits, corrupted)
    with pytest.raises(UserError, match="loss_per_token"):
        m(x, return_type="loss", loss_per_token=True)
    # an AR objective gives TransformerLens's loss; its pad_id is left out of the mean
    ar = _perturbed()
    with torch.no_grad():
        lp = ar(x, return_type="loss", loss_per_token=True)
        padded = ar(x, return_type="loss", objective=ARObjective(pad_id=int(x[0, 1])))
    keep = x[:, 1:] != x[0, 1]
    assert torch.allclose(padded, lp[keep].mean()) and not torch.allclose(padded, lp.mean())
    with pytest.raises(UserError, match="return_type must be"):
        ar(x, return_type="probs")


def test_to_single_token_and_to_tokens_write_the_mask():
    tok = CharTokenizer.train("abcdefghijk")
    m = _perturbed(attn_mask="bidirectional", vocab_size=V + 1)
    m.tokenizer = tok
    assert m.to_single_token("c") == tok.encode("c")[0]
    assert m.to_single_token("[M]") == V                               # one past the tokenizer's vocabulary
    ids = m.to_tokens("ab[M]c[M]")
    assert ids[0].tolist() == tok.encode("ab") + [V] + tok.encode("c") + [V]
    assert m.to_string(ids[0]) == "ab[M]c[M]"                           # and back
    with pytest.raises(UserError, match="2 tokens"):
        m.to_single_token("ab")
    with torch.no_grad():
        _, cache = m.run_with_cache(ids)
    parts = cache.decompose_resid()
    assert torch.equal(cache.logit_attrs(parts, "c", "[M]"), cache.logit_attrs(parts, tok.encode("c")[0], V))
    ar = _perturbed()
    ar.tokenizer = tok
    with pytest.raises(UserError, match="no mask id"):
        ar.to_tokens("a[M]")
    ar.objective = MaskedDiffusionObjective(mask_id=3)                 # an objective's mask id wins
    assert ar.to_tokens("a[M]")[0].tolist() == tok.encode("a") + [3]


def test_stack_activation_and_remove_batch_dim():
    m, x = _perturbed(), _tokens()
    with torch.no_grad():
        _, cache = m.run_with_cache(x)
    assert torch.equal(cache.stack_activation("hook_z", layer=1)[0], cache["blocks.0.attn.z"])
    normalized = cache.stack_activation("normalized", sublayer_type="ln1")
    assert torch.equal(normalized[1], cache["blocks.1.ln1.hook_normalized"])
    assert torch.equal(cache["hook_q", 1], cache["blocks.1.attn.q"])
    assert torch.equal(cache["q", 1, "attn"], cache["q", 1])
    assert torch.equal(cache["resid_mid", 0, "block"], cache["blocks.0.resid_mid"])
    with pytest.raises(UserError, match="batch of one"):
        cache.remove_batch_dim()
    with torch.no_grad():
        _, one = m.run_with_cache(x[:1])
    assert one.remove_batch_dim() is one and not one.has_batch_dim
    assert one["pattern", 0].shape == (4, 8, 8) and one.stack_head_results().shape == (8, 8, 16)
    with torch.no_grad():
        _, squeezed = m.run_with_cache(x[:1], remove_batch_dim=True)          # TransformerLens's keyword
    assert torch.equal(squeezed["blocks.1.hook_resid_post"], cache["blocks.1.resid_post"][0])
    assert torch.allclose(one.logit_attrs(one.decompose_resid(), x[0]),
                          cache.logit_attrs(cache.decompose_resid(), x)[:, 0], atol=1e-12)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_text_helpers_match_transformer_lens_with_the_same_tokenizer(tmp_path):
    """to_single_token / to_tokens / to_str_tokens / to_string and logit_attrs with a token string, against
    TransformerLens given the same BPE tokenizer (as a Hugging Face tokenizer) and the same weights."""
    from transformers import PreTrainedTokenizerFast

    from dlmlab.data.tokenizer import BPETokenizer

    eos = "<|endoftext|>"
    tok = BPETokenizer.train("the cat sat on the mat. the dog sat on the log. " * 20, vocab_size=300,
                             special_tokens=[eos])
    PreTrainedTokenizerFast(tokenizer_object=tok.tok, eos_token=eos, pad_token=eos, bos_token=eos).save_pretrained(
        tmp_path)
    m = _perturbed(vocab_size=tok.tok.get_vocab_size())
    ref = tl_twin(m)
    ref.set_tokenizer(PreTrainedTokenizerFast.from_pretrained(tmp_path))
    m.tokenizer = tok
    text = " the cat sat on the mat"
    assert m.to_single_token(" cat") == ref.to_single_token(" cat")
    ids = m.to_tokens(text)
    assert torch.equal(ids, ref.to_tokens(text, prepend_bos=False))
    assert torch.equal(m.to_tokens([" the cat", " the dog"]), ref.to_tokens([" the cat", " the dog"], prepend_bos=False))
    assert m.to_str_tokens(text) == ref.to_str_tokens(text, prepend_bos=False)
    assert m.to_string(ids[0]) == ref.to_string(ids[0])
    with torch.no_grad():
        _, ours = m.run_with_cache(ids)
        _, theirs = ref.run_with_cache(ids)
    got = ours.logit_attrs(ours.decompose_resid(apply_ln=False), " cat", " dog")
    want = theirs.logit_attrs(theirs.decompose_resid(apply_ln=False), " cat", " dog")
    assert torch.allclose(got, want, atol=1e-10)
