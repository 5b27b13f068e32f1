"""Every family built by build_model follows the one model protocol (dlmlab.models.protocol)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from dlmlab.errors import UserError
from dlmlab.interp.hooks import HookedModule, HookPoint
from dlmlab.models import KVCache
from dlmlab.models.checks import ModelInputError
from dlmlab.models.factory import build_model, config_class, model_config
from dlmlab.models.protocol import (COMMON_KEYWORDS, FAMILIES, FAMILY_POINTS, ProtocolError, SequenceModel,
                                    check_protocol, has_attention, protocol_problems, residual_point_names)
from dlmlab.models.stacked import ssm_states

V = 11


def _model(family: str, **kw) -> nn.Module:
    torch.manual_seed(0)
    return build_model(family, vocab_size=V, d_model=16, n_layers=2, match_params=False, **kw).double().eval()


def _tokens(seed: int = 0, B: int = 2, T: int = 7) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
def test_family_follows_the_protocol(family):
    m = _model(family)
    check_protocol(m)
    assert isinstance(m, SequenceModel)
    assert m.family == m.cfg.family == family == model_config(family, vocab_size=V).family
    assert config_class(family) is type(m.cfg)
    names = set(m.hook_points)
    assert set(residual_point_names(m)) <= names
    for fam, points in FAMILY_POINTS.items():  # family-specific points only on their family
        present = {p.format(i=i) for p in points for i in range(2)} <= names
        assert present == (fam == family or set(points) <= set(FAMILY_POINTS[family])), fam
    assert has_attention(m) == m.supports_kv_cache == (family == "transformer")
    assert any(".attn." in n for n in names) == (family == "transformer")
    sig = inspect.signature(m.forward)
    assert list(sig.parameters)[0] == "tokens"
    for k in COMMON_KEYWORDS:
        assert sig.parameters[k].kind is inspect.Parameter.KEYWORD_ONLY and sig.parameters[k].default is None
    logits = m(_tokens())
    assert logits.shape == (2, 7, V) and logits.dtype == torch.float64


@pytest.mark.parametrize("family", FAMILIES)
def test_residual_points_add_up(family):
    m = _model(family)
    with torch.no_grad(), m.cache() as c:
        m(_tokens())
    for i in range(2):
        b = f"blocks.{i}."
        pre, mix, post = c[b + "resid_pre"], c[b + "mixer_out"], c[b + "resid_post"]
        if family == "transformer":
            assert c[b + "attn_out"].data_ptr() == mix.data_ptr()  # the same tensor under both names
            torch.testing.assert_close(c[b + "resid_mid"], pre + mix, rtol=0, atol=1e-12)
            torch.testing.assert_close(post, pre + mix + c[b + "mlp_out"], rtol=0, atol=1e-12)
        else:
            assert m.residual_stream == (family in ("mamba", "mamba2"))
            torch.testing.assert_close(post, pre + mix if m.residual_stream else mix, rtol=0, atol=1e-12)
        if family in ("lstm", "gru"):
            assert c[b + "rnn_out"].data_ptr() == mix.data_ptr()
        if i:
            assert torch.equal(pre, c["blocks.0.resid_post"])
    if family != "transformer":  # no positions: block 0 reads the token embedding itself
        assert torch.equal(c["embed"], c["blocks.0.resid_pre"])


@pytest.mark.parametrize("family", FAMILIES + ("residual_gru",))
def test_patching_mixer_out_changes_the_output_as_expected(family):
    kw = {"residual": True} if family == "residual_gru" else {}
    m = _model("gru" if family == "residual_gru" else family, **kw)
    a, b = _tokens(0), _tokens(1)
    point = "blocks.1.mixer_out"
    with torch.no_grad():
        with m.cache([point]) as cb:
            m(b)
        ya = m(a)
        with m.cache(["blocks.1.resid_pre"]) as ca:
            m(a)
        with m.replace({point: lambda x: x}):
            assert torch.equal(m(a), ya)  # an identity replacement changes nothing
        with m.replace({point: cb[point]}), m.cache(["blocks.1.resid_post", "blocks.1.mlp_out"]
                                                      if family == "transformer" else ["blocks.1.resid_post"]) as cp:
            yp = m(a)
    assert not torch.allclose(yp, ya)
    post = cp["blocks.1.resid_post"] - cp.get("blocks.1.mlp_out", 0)
    want = ca["blocks.1.resid_pre"] + cb[point] if m.residual_stream else cb[point]
    torch.testing.assert_close(post, want, rtol=0, atol=1e-12)
    if family in ("lstm", "gru"):  # plain stack: the last layer's output is run b's, so are the logits
        torch.testing.assert_close(yp, m(b).detach(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("family", FAMILIES)
def test_common_keywords(family):
    m = _model(family)
    x = _tokens()
    y = m(x)
    assert torch.equal(m(x, attn_mask="causal", prompt_len=3), y)
    e = torch.randn(2, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with m.add({"blocks.0.resid_pre": e}):
        want = m(x)
    torch.testing.assert_close(m(x, embed_add=e), want, rtol=0, atol=1e-12)
    assert not torch.allclose(want, y)
    if family == "transformer":
        m(x, attn_mask="bidirectional", kv_cache=KVCache())
        return
    name = {"mamba": "Mamba", "mamba2": "Mamba-2", "lstm": "LSTM", "gru": "GRU"}[family]
    for mask, shown in (("bidirectional", "'bidirectional'"), ("hybrid", "'hybrid'"),
                        (torch.ones(1, 1, 7, 7, dtype=torch.bool), "a mask tensor")):
        with pytest.raises(ModelInputError, match=f"^attn_mask={shown} needs an attention model; a {name} is causal"):
            m(x, attn_mask=mask)
    with pytest.raises(ModelInputError, match=f"kv_cache needs an attention model; a {name} has no keys"):
        m(x, kv_cache=KVCache())
    assert issubclass(ModelInputError, UserError) and issubclass(ModelInputError, ValueError)


@pytest.mark.parametrize("family", FAMILIES)
def test_bad_tokens_are_user_errors(family):
    m = _model(family)
    with pytest.raises(ModelInputError, match=f"token id {V} out of range \\[0, {V}\\) for this model"):
        m(torch.tensor([[0, V]]))
    with pytest.raises(ModelInputError, match="integer tensor"):
        m(torch.zeros(1, 3))


def test_ssm_states_is_one_function_and_refuses_other_families():
    from dlmlab.models import mamba, mamba2

    assert mamba.ssm_states is mamba2.ssm_states is ssm_states
    assert [s.shape for s in ssm_states(_model("mamba", d_inner=8, d_state=3), _tokens())] == [(2, 7, 8, 3)] * 2
    with pytest.raises(ModelInputError, match="ssm_states needs a Mamba or Mamba-2 model; got a RecurrentModel"):
        ssm_states(_model("lstm"), _tokens())


def test_protocol_problems_name_what_is_missing():
    class Half(HookedModule):
        family = "custom"

        def __init__(self):
            super().__init__()
            self.embed, self.final, self.logits = HookPoint(), HookPoint(), HookPoint()
            self.blocks = nn.ModuleList([nn.Module()])
            self.blocks[0].resid_post = HookPoint()
            self.setup_hooks()

        def forward(self, tokens):
            return tokens

    problems = protocol_problems(Half())
    assert problems == ["no residual_stream flag (bool)", "no supports_kv_cache flag (bool)",
                        "missing hook points blocks.0.resid_pre, blocks.0.mixer_out",
                        "no has_attention, norm_scale, scale_like_norm methods (inherit "
                        "dlmlab.models.protocol.ProtocolMethods)",
                        "forward does not accept the common keywords attn_mask, prompt_len, embed_add, kv_cache"]
    with pytest.raises(ProtocolError, match="^Half does not follow the dlmlab model protocol: no residual_stream"):
        check_protocol(Half())
    assert protocol_problems(nn.Linear(2, 2))[0] == "no family (model.family or model.cfg.family)"
