"""What the interpretability core asks a model goes through the protocol's methods (has_attention, norm_scale,
scale_like_norm, family_name), which every family has; the cache computes with them exactly what the norm
functions compute, and a model without them gets a one-line error instead of a silent fallback."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlmlab.errors import UserError
from dlmlab.interp.hooks import HookedModule, HookPoint
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.models import norm_scale as ns
from dlmlab.models.factory import build_model
from dlmlab.models.hf_hooked import HFHooked
from dlmlab.models.protocol import FAMILIES, FAMILY_NAMES, PROTOCOL_METHODS, ProtocolMethods, has_attention
from dlmlab.prediff.model import PreDiffLM

V = 11


def _model(family: str) -> nn.Module:
    torch.manual_seed(0)
    return build_model(family, vocab_size=V, d_model=16, n_layers=2, match_params=False).double().eval()


def _x(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_has_the_protocol_methods(family):
    m = _model(family)
    assert isinstance(m, ProtocolMethods) and all(callable(getattr(m, n)) for n in PROTOCOL_METHODS)
    assert m.has_attention() is has_attention(m) is (family == "transformer")
    assert m.family_name == FAMILY_NAMES[family]
    x = torch.randn(2, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    norm = m.ln_final
    s = m.norm_scale(norm, x)
    assert torch.equal(s, ns.norm_scale(norm, x)) and s.shape == (2, 7)
    assert torch.equal(m.scale_like_norm(norm, x, s), ns.scale_like_norm(norm, x, s))


def test_hf_wrapper_and_prediff_model_have_them():
    assert issubclass(HFHooked, ProtocolMethods)
    torch.manual_seed(0)
    backbone = Transformer(TransformerConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, d_mlp=16))
    pm = PreDiffLM(backbone, mask_id=V - 1)
    x = torch.randn(3, 16)
    assert pm.has_attention() is has_attention(pm) is False  # no blocks of its own: the hook points are the backbone's
    assert backbone.has_attention() is True and pm.family_name == "PreDiffLM"
    assert torch.equal(pm.norm_scale(backbone.ln_final, x), ns.norm_scale(backbone.ln_final, x))
    s = pm.norm_scale(backbone.ln_final, x)
    assert torch.equal(pm.scale_like_norm(backbone.ln_final, x, s), ns.scale_like_norm(backbone.ln_final, x, s))


@pytest.mark.parametrize("family", ["transformer", "mamba"])
def test_the_cache_goes_through_the_model_methods(family, monkeypatch):
    """apply_ln_to_stack is the model's norm_scale / scale_like_norm (bit for bit the functions), and
    stack_head_results asks the model's has_attention."""
    m = _model(family)
    _, cache = m.run_with_cache(_x())
    parts = cache.decompose_resid()
    resid = cache[f"blocks.{len(m.blocks) - 1}.resid_post"]
    want = ns.scale_like_norm(m.ln_final, parts, ns.norm_scale(m.ln_final, resid))
    assert torch.equal(cache.apply_ln_to_stack(parts), want)
    calls = []
    monkeypatch.setattr(type(m), "norm_scale",
                        lambda self, norm, x: calls.append("norm_scale") or ns.norm_scale(norm, x))
    monkeypatch.setattr(type(m), "has_attention", lambda self: calls.append("has_attention") or False)
    cache.apply_ln_to_stack(parts)
    with pytest.raises(UserError, match="stack_head_results needs attention heads"):
        cache.stack_head_results()
    assert calls == ["norm_scale", "has_attention"]


class _NoProtocol(HookedModule):
    """A hooked model with a residual stream and a final norm, but none of the protocol's methods."""

    residual_stream = True

    def __init__(self):
        super().__init__()
        self.emb, self.ln_final, self.unembed = nn.Embedding(V, 8), nn.LayerNorm(8), nn.Linear(8, V)
        self.embed, self.final, self.logits = HookPoint(), HookPoint(), HookPoint()
        self.blocks = nn.ModuleList([nn.Module()])
        for p in ("resid_pre", "mixer_out", "resid_post"):
            setattr(self.blocks[0], p, HookPoint())
        self.setup_hooks()

    def forward(self, tokens):
        b = self.blocks[0]
        h = b.resid_pre(self.embed(self.emb(tokens)))
        h = b.resid_post(h + b.mixer_out(torch.tanh(h)))
        return self.logits(self.unembed(self.final(self.ln_final(h))))


def test_a_model_without_the_methods_gets_one_line():
    m = _NoProtocol()
    _, cache = m.run_with_cache(_x())
    with pytest.raises(UserError, match=r"^apply_ln_to_stack needs model.norm_scale\(\) \(the dlmlab model protocol, "
                                        r"dlmlab.models.protocol\); this _NoProtocol has none$"):
        cache.apply_ln_to_stack(cache.decompose_resid())
    with pytest.raises(UserError, match="^stack_head_results needs attention heads .* this _NoProtocol model has none"):
        cache.stack_head_results()
