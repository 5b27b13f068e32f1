"""Tokenizers show the mask id as ``[M]``: an mdlm run's character tokenizer and a BPE tokenizer, and ids outside
the vocabulary are one-line errors."""

from __future__ import annotations

import pytest
import torch

import dlmlab
from dlmlab.interp.activation_cache import to_str_tokens
from dlmlab.data.tokenizer import MASK_TEXT, BPETokenizer, CharTokenizer, tokenizer_from_json
from dlmlab.objectives import MaskedDiffusionObjective
from dlmlab.training import TrainConfig, train


@pytest.fixture
def mdlm_run(tmp_path):
    """A two-step mdlm run written by ``train`` (the mask id is one past the 12-character tokenizer)."""
    V = 12
    model = dlmlab.models.Transformer(dlmlab.models.TransformerConfig(
        vocab_size=V + 1, d_model=16, n_layers=1, n_heads=2, d_mlp=0, attn_mask="bidirectional", positions="rope"))
    train(model, TrainConfig(steps=2, batch_size=2, progress=False),
          lambda step, gen: torch.randint(0, V, (2, 6), generator=gen), MaskedDiffusionObjective(V),
          out_dir=tmp_path / "run", tokenizer=CharTokenizer.train("abcdefghijkl"))
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
