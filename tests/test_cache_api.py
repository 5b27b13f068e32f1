"""The activation cache's user-facing behaviour: deferred attention patterns do not follow later in-place edits
of the tokens or of forward tensors, and a cache-key typo names the closest keys."""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_transformer
from dlmlab.interp.activation_cache import MissingActivation


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
