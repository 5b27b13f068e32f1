"""Stacked LSTM / GRU: each layer equals torch's single-layer cell, the stack equals nn.LSTM/GRU(num_layers)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlmlab.config import ConfigError
from dlmlab.models.recurrent import RecurrentConfig, RecurrentModel


def _model(cell, **kw):
    torch.manual_seed(0)
    return RecurrentModel(RecurrentConfig(cell=cell, vocab_size=9, n_out=4, d_model=6, hidden_size=7, n_layers=3, **kw))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_layers_match_torch_single_layer_and_stack(cell):
    m = _model(cell).double()
    tokens = torch.randint(0, 9, (3, 11))
    with m.cache() as c:
        m(tokens)
    rnn_cls = nn.LSTM if cell == "lstm" else nn.GRU
    # each layer == a fresh single-layer torch RNN with the same weights, fed that layer's input
    for i, block in enumerate(m.blocks):
        ref = rnn_cls(6 if i == 0 else 7, 7, num_layers=1, batch_first=True).double()
        ref.load_state_dict(block.rnn.state_dict())
        want, _ = ref(c[f"blocks.{i}.resid_pre"])
        torch.testing.assert_close(c[f"blocks.{i}.rnn_out"], want, rtol=0, atol=0)
        torch.testing.assert_close(c[f"blocks.{i}.resid_post"], want, rtol=0, atol=0)
    # the whole stack == one multi-layer torch RNN with the per-layer weights copied in
    stack = rnn_cls(6, 7, num_layers=3, batch_first=True).double()
    with torch.no_grad():
        for i, block in enumerate(m.blocks):
            for name, p in block.rnn.named_parameters():
                getattr(stack, name.replace("_l0", f"_l{i}")).copy_(p)
    want, _ = stack(c["embed"])
    torch.testing.assert_close(c["blocks.2.resid_post"], want, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(c["logits"], m.unembed(want), atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_hooks_causality_and_patching(cell):
    m = _model(cell)
    a = torch.randint(0, 9, (2, 8))
    b = a.clone()
    b[:, 5:] = (b[:, 5:] + 1) % 9
    with m.cache() as c:
        ya = m(a)
    assert set(c) >= {"embed", "blocks.0.resid_pre", "blocks.0.rnn_out", "blocks.2.resid_post", "final", "logits"}
    assert c["blocks.0.resid_pre"].shape == (2, 8, 6) and c["blocks.1.resid_pre"].shape == (2, 8, 7)
    assert torch.allclose(ya[:, :5], m(b)[:, :5])
    with m.replace({"blocks.1.resid_post": torch.zeros(1)}):
        assert not torch.allclose(m(a), ya)


def test_residual_option_and_errors():
    m = RecurrentModel(RecurrentConfig(cell="gru", vocab_size=5, d_model=8, n_layers=2, residual=True))
    with m.cache(["blocks.1.*"]) as c:
        m(torch.randint(0, 5, (1, 4)))
    torch.testing.assert_close(c["blocks.1.resid_post"], c["blocks.1.resid_pre"] + c["blocks.1.rnn_out"])
    with pytest.raises(ConfigError, match="residual needs d_model == hidden_size"):
        RecurrentModel(RecurrentConfig(vocab_size=5, d_model=8, hidden_size=9, residual=True))
    with pytest.raises(ConfigError, match="cell"):
        RecurrentModel(RecurrentConfig(cell="rnn", vocab_size=5))
    with pytest.raises(ValueError, match="integer tensor"):
        m(torch.zeros(1, 3))
