"""A new user's path end to end (issue 23, items 1, 4 and 6): deferred attention patterns do not follow
later in-place edits of the tokens, an mdlm run's tokenizer shows the mask id as ``[M]``, and a cache-key
typo names the closest keys."""

from __future__ import annotations

import pytest
import torch

import dlmlab
from conftest import tiny_transformer
from dlmlab.cache import MissingActivation, to_str_tokens
from dlmlab.data.tokenizer import MASK_TEXT, BPETokenizer, CharTokenizer, tokenizer_from_json
from dlmlab.objectives import mdlm_loss
from dlmlab.training import TrainConfig, train


def test_deferred_patterns_ignore_in_place_edits_of_the_tokens(tokens):
    """run_with_cache(names=None) computes the patterns later; editing ``tokens`` in place meanwhile must not
    change them: they equal the patterns recorded eagerly in the same forward."""
    model = tiny_transformer(attn_mask="bidirectional")
    x = tokens.clone()
    with torch.no_grad():
        _, eager = model.run_with_cache(x, ["blocks.*.attn.pattern"])
        _, cache = model.run_with_cache(x)
    assert cache.deferred == ["blocks.0.attn.pattern", "blocks.1.attn.pattern"]
    x[:, :6] = (x[:, :6] + 5) % 23  # the user reuses the batch tensor
    for layer in (0, 1):
        assert torch.equal(cache["pattern", layer], eager["pattern", layer]), layer


def test_deferred_patterns_ignore_in_place_edits_of_forward_tensors(tokens):
    """The same for a tensor keyword of the forward (``embed_add``)."""
    model = tiny_transformer(attn_mask="bidirectional")
    add = torch.zeros(tokens.shape + (32,))
    with torch.no_grad():
        _, eager = model.run_with_cache(tokens, ["blocks.0.attn.pattern"], embed_add=add)
        _, cache = model.run_with_cache(tokens, embed_add=add)
    add.normal_(0, 3.0)
    assert torch.equal(cache["pattern", 0], eager["pattern", 0])


@pytest.fixture
def mdlm_run(tmp_path):
    """A two-step mdlm run written by ``train`` (the mask id is one past the 12-character tokenizer)."""
    V = 12
    model = dlmlab.models.Transformer(dlmlab.models.TransformerConfig(
        vocab_size=V + 1, d_model=16, n_layers=1, n_heads=2, d_mlp=0, attn_mask="bidirectional", positions="rope"))
    train(model, TrainConfig(steps=2, batch_size=2, progress=False),
          make_batch=lambda step, gen: {"tokens": torch.randint(0, V, (2, 6), generator=gen)},
          loss_fn=lambda m, batch: mdlm_loss(m, batch["tokens"], mask_id=V),
          out_dir=tmp_path / "run", objective="mdlm", mask_id=V, tokenizer=CharTokenizer.train("abcdefghijkl"))
    return dlmlab.load(tmp_path / "run")


def test_an_mdlm_runs_tokenizer_decodes_the_mask_id(mdlm_run):
    tok, mask = mdlm_run.tokenizer, mdlm_run.mask_id
    assert (mdlm_run.objective, mask, tok.vocab_size) == ("mdlm", 12, 12)
    assert tok.decode([mask]) == MASK_TEXT == "[M]"
    assert tok.decode([0, mask, 1, mask]) == "a[M]b[M]"
    tokens = torch.tensor([[0, 1, mask], [mask, 2, 3]])
    assert to_str_tokens(tok, tokens) == [["a", "b", "[M]"], ["[M]", "c", "d"]]
    logits, _ = mdlm_run.model.run_with_cache(tokens)
    assert logits.shape == (2, 3, 13)
    with pytest.raises(ValueError, match=r"token id 13 is outside this tokenizer's vocabulary \(ids 0\.\.11"):
        tok.decode([13])
    with pytest.raises(ValueError, match="token id -1 is outside"):
        tok.decode([-1])


def test_bpe_tokenizer_decodes_the_mask_id():
    tok = BPETokenizer.train("the cat sat on the mat. " * 20, vocab_size=280)
    tok = tokenizer_from_json(tok.to_json())
    ids = tok.encode("the cat")
    V = tok.vocab_size
    assert tok.decode(ids) == "the cat"
    assert tok.decode(ids[:1] + [V] + ids[1:]) == tok.decode(ids[:1]) + "[M]" + tok.decode(ids[1:])
    assert to_str_tokens(tok, [V]) == ["[M]"]
    with pytest.raises(ValueError, match=f"token id {V + 1} is outside"):
        tok.decode([V + 1])


def test_a_cache_key_typo_names_the_closest_keys(tokens):
    model = tiny_transformer()
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    with pytest.raises(KeyError) as err:
        cache["blocks.0.atn_out"]  # noqa: B018
    assert isinstance(err.value, MissingActivation)
    msg = str(err.value)
    assert msg.startswith("hook point 'blocks.0.atn_out', which this Transformer model does not have; did you mean ")
    assert msg.split("did you mean ")[1].startswith("'blocks.0.attn_out'")
    with pytest.raises(KeyError, match=r"did you mean 'blocks\.1\.resid_post'"):
        cache["resid_pst", 1]
    with pytest.raises(KeyError) as far:
        cache["zzz"]  # noqa: B018
    assert "did you mean" not in str(far.value)
