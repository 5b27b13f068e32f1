"""HFHooked: the toolkit hook points on tiny random Hugging Face GPT-NeoX (Pythia) and Mamba models."""

from __future__ import annotations

import pytest
import torch

from dlmlab.errors import UserError
from dlmlab.models.checks import ModelInputError
from dlmlab.models.hf_hooked import HFHooked, load_hf_hooked
from dlmlab.models.protocol import check_protocol

transformers = pytest.importorskip("transformers")


def _config(kind: str, parallel: bool = True):
    if kind == "neox":
        return transformers.GPTNeoXConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=64, max_position_embeddings=64,
                                          use_parallel_residual=parallel)
    return transformers.MambaConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2, state_size=4, expand=2)


def _save(kind: str, path, causal: bool = True, parallel: bool = True):
    torch.manual_seed(0)
    cfg = _config(kind, parallel)
    cls = {("neox", True): transformers.GPTNeoXForCausalLM, ("neox", False): transformers.GPTNeoXModel,
           ("mamba", True): transformers.MambaForCausalLM, ("mamba", False): transformers.MambaModel}[kind, causal]
    model = cls(cfg)
    model.save_pretrained(path)
    return model.eval()


def _tokens(T: int = 9) -> torch.Tensor:
    return torch.randint(0, 32, (2, T), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kind", ["neox", "mamba"])
def test_lm_head_matches_hf(kind, tmp_path):
    ref = _save(kind, tmp_path)
    m = load_hf_hooked(tmp_path)  # n_out = 0: the checkpoint's own LM head
    x = _tokens()
    names = ["embed", "final", "logits"] + [f"blocks.{i}.{h}" for i in range(2) for h in ("resid_pre", "resid_post")]
    with torch.no_grad():
        out = ref(input_ids=x, output_hidden_states=True)
        with m.cache(names) as c:
            y = m(x)
    assert m.n_out == 32 and y.shape == (2, 9, 32)
    torch.testing.assert_close(y, out.logits)
    torch.testing.assert_close(c["logits"], out.logits)
    hs = out.hidden_states
    if kind == "neox":  # (embeddings, layer 0, layer 1 normed)
        torch.testing.assert_close(c["embed"], hs[0])
        torch.testing.assert_close(c["blocks.0.resid_post"], hs[1])
        torch.testing.assert_close(c["blocks.1.resid_pre"], hs[1])
        torch.testing.assert_close(c["final"], hs[-1])
        norm = ref.gpt_neox.final_layer_norm
    else:  # Mamba: (layer 0, layer 1, normed last)
        torch.testing.assert_close(c["embed"], ref.backbone.embeddings(x))
        torch.testing.assert_close(c["blocks.0.resid_post"], hs[0])
        torch.testing.assert_close(c["blocks.1.resid_post"], hs[1])
        torch.testing.assert_close(c["final"], hs[-1])
        norm = ref.backbone.norm_f
    torch.testing.assert_close(c["blocks.0.resid_pre"], c["embed"])
    torch.testing.assert_close(norm(c["blocks.1.resid_post"]), c["final"])


@pytest.mark.parametrize("kind,parallel", [("neox", True), ("neox", False), ("mamba", True)])
def test_mixer_out_sums_to_the_residual(kind, parallel, tmp_path):
    """resid_post = resid_pre + mixer_out (+ mlp_out) in every layer; the mixer is the attention / SSM."""
    _save(kind, tmp_path, parallel=parallel)
    m = load_hf_hooked(tmp_path)
    with torch.no_grad(), m.cache() as c:
        m(_tokens())
    for i in range(2):
        total = c[f"blocks.{i}.resid_pre"] + c[f"blocks.{i}.mixer_out"]
        if kind == "neox":
            total = total + c[f"blocks.{i}.mlp_out"]
        torch.testing.assert_close(total, c[f"blocks.{i}.resid_post"])
    assert ("blocks.0.mlp_out" in m.hook_points) == (kind == "neox")


@pytest.mark.parametrize("kind", ["neox", "mamba"])
def test_interventions_reach_the_model(kind, tmp_path):
    ref = _save(kind, tmp_path)
    m = load_hf_hooked(tmp_path)
    x = _tokens()
    with torch.no_grad():
        y = m(x)
        # replacing resid_pre of layer 1 by layer 0's output is the identity
        with m.cache(["blocks.0.resid_post"]) as c:
            m(x)
        with m.replace({"blocks.1.resid_pre": c["blocks.0.resid_post"]}):
            torch.testing.assert_close(m(x), y)
        # zeroing the last layer's residual input = the LM head on norm(mixer + mlp of a zero input)
        with m.replace({"blocks.1.resid_pre": torch.zeros(())}):
            y0 = m(x)
        with m.replace({"blocks.0.mixer_out": lambda a: a * 0}):
            y1 = m(x)
        with m.add({"final": torch.ones(32)}):
            y2 = m(x)
    assert (y - y0).abs().max() > 1e-3 and (y - y1).abs().max() > 1e-3
    torch.testing.assert_close(y2 - y, m.head(torch.ones(32)).expand_as(y) - m.head(torch.zeros(32)))
    # hooks are gone after the blocks: the HF model itself is untouched
    with torch.no_grad():
        torch.testing.assert_close(ref(input_ids=x).logits, y)


@pytest.mark.parametrize("kind", ["neox", "mamba"])
def test_tagging_head_on_base(kind, tmp_path):
    _save(kind, tmp_path, causal=False)
    torch.manual_seed(0)
    m = load_hf_hooked(tmp_path, n_out=3)
    x = _tokens()
    with torch.no_grad(), m.cache(["final"]) as c:
        y = m(x)
    assert y.shape == (2, 9, 3) and m.n_out == 3 and m.vocab_size == 32
    torch.testing.assert_close(y, m.head(c["final"]))
    # gradients flow into the HF weights through the hooks
    m(x).sum().backward()
    # exactly the rows of the ids in x get a gradient (the tagging head does not read the embedding matrix)
    seen = torch.zeros(32, dtype=torch.bool)
    seen[x.flatten()] = True
    assert torch.equal(m.base.get_input_embeddings().weight.grad.abs().sum(1) > 0, seen) and not seen.all()
    with pytest.raises(ModelInputError, match="token id 40 out of range"):
        m(torch.tensor([[40]]))
    with pytest.raises(ValueError, match="LM head"):
        HFHooked(m.base, 0)


def test_causal_save_loads_as_base_for_tagging(tmp_path):
    ref = _save("neox", tmp_path, causal=True)
    m = load_hf_hooked(tmp_path, n_out=4)
    x = _tokens()
    with torch.no_grad(), m.cache(["final"]) as c:
        m(x)
        torch.testing.assert_close(c["final"], ref.gpt_neox(input_ids=x).last_hidden_state)


def test_missing_folder_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="config.json"):
        load_hf_hooked(tmp_path / "nothing")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot load"):
        load_hf_hooked(tmp_path)
    _save("mamba", tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").write_bytes(b"garbage" * 10)  # truncated / corrupt weights
    with pytest.raises(UserError, match="cannot load"):
        load_hf_hooked(tmp_path / "m", n_out=2)


def test_fused_mamba_equals_hf_path_in_float64(tmp_path):
    """The fused-scan Mamba mixer gives HF's own result (outputs and gradients); HF's path stays available."""
    _save("mamba", tmp_path)
    fast = load_hf_hooked(tmp_path, dtype=torch.float64)
    slow = load_hf_hooked(tmp_path, dtype=torch.float64, fused_mamba=False)
    x = _tokens(T=23)
    outs = []
    for m in (fast, slow):
        with m.cache(["blocks.*.mixer_out"]) as c:
            y = m(x)
        y.square().mean().backward()
        outs.append((y.detach(), c, {n: p.grad for n, p in m.named_parameters()}))
    (y1, c1, g1), (y2, c2, g2) = outs
    torch.testing.assert_close(y1, y2)  # float64 tolerances
    for n in c1:
        torch.testing.assert_close(c1[n], c2[n])
    for n in g1:
        torch.testing.assert_close(g1[n], g2[n], msg=n)
    assert type(fast.base.layers[0].mixer).forward is not fast.base.layers[0].mixer.forward.__func__


@pytest.mark.parametrize("kind", ["neox", "mamba"])
def test_follows_the_model_protocol(kind, tmp_path):
    _save(kind, tmp_path)
    m = load_hf_hooked(tmp_path)
    check_protocol(m)
    assert m.family == {"neox": "transformer", "mamba": "mamba"}[kind] and m.residual_stream
    x = _tokens()
    add = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = m(x, attn_mask="causal", prompt_len=3)
        torch.testing.assert_close(y, m(x))
        with m.cache(["embed"]) as c:
            m(x)
        with m.replace({"blocks.0.resid_pre": c["embed"] + add}):
            want = m(x)
        with m.cache(["embed"]) as c2:
            got = m(x, embed_add=add)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(c2["embed"], c["embed"])  # embed_add comes after the embed point
    with pytest.raises(ModelInputError, match="causal"):
        m(x, attn_mask="bidirectional")
    with pytest.raises(ModelInputError, match="kv_cache"):
        m(x, kv_cache=object())


@pytest.mark.parametrize("kind", ["neox", "mamba"])
def test_deepcopy_has_its_own_hook_points(kind, tmp_path):
    import copy

    _save(kind, tmp_path)
    m = load_hf_hooked(tmp_path)
    twin = copy.deepcopy(m)
    x = _tokens()
    with torch.no_grad():
        y = m(x)
        torch.testing.assert_close(twin(x), y)
        with twin.replace({"blocks.0.resid_post": torch.zeros(())}), m.cache(["blocks.0.resid_post"]) as c:
            y_twin = twin(x)
            assert not c  # the original's points saw nothing
            torch.testing.assert_close(m(x), y)  # and the original is unchanged
        assert (y_twin - y).abs().max() > 1e-3
        with twin.cache(["blocks.1.mixer_out"]) as c:
            twin(x)
    assert set(c) == {"blocks.1.mixer_out"}
