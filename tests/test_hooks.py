"""Hook points: cache / replace / add / hooks, removal (also on error), per-head outputs (opt-in)."""

import pytest
import torch

from conftest import tiny_transformer


def all_inactive(model) -> bool:
    return not any(hp.active for hp in model.hook_points.values())


def test_hook_point_names_cover_the_documented_set():
    model = tiny_transformer()
    names = set(model.hook_points)
    expected = {"embed", "pos_embed", "final", "logits", "ln_final.scale", "ln_final.normalized"}
    for i in range(2):
        expected |= {f"blocks.{i}.{n}" for n in ["resid_pre", "attn_out", "mixer_out", "resid_mid", "mlp_out", "resid_post",
                                                 "attn.q", "attn.k", "attn.v", "attn.pattern", "attn.z",
                                                 "attn.head_out", "mlp.post", "ln1.scale", "ln1.normalized",
                                                 "ln2.scale", "ln2.normalized"]}
    assert names == expected
    # the norms' inner points (TransformerLens's hook_scale / hook_normalized) are opt-in like head_out
    assert {n for n, h in model.hook_points.items() if h.opt_in} == {n for n in expected if n.endswith(
        ("head_out", ".scale", ".normalized"))}


def test_cache_records_shapes_and_is_removed(tokens):
    model = tiny_transformer()
    with torch.no_grad(), model.cache() as c:
        logits = model(tokens)
    assert all_inactive(model)
    assert c["logits"].shape == (3, 12, 23) and torch.equal(c["logits"], logits)
    assert c["blocks.1.attn.q"].shape == (3, 12, 4, 8)
    assert c["blocks.1.attn.pattern"].shape == (3, 4, 12, 12)
    # the per-head output is opt-in: left out of names=None, built when named
    assert "blocks.1.attn.head_out" not in c and model.hook_points["blocks.1.attn.head_out"].opt_in
    with torch.no_grad(), model.cache(["blocks.1.attn.head_out"]) as c_heads:
        model(tokens)
    assert c_heads["blocks.1.attn.head_out"].shape == (3, 12, 4, 32)
    assert c["blocks.0.mlp.post"].shape == (3, 12, 64)
    # the residual stream adds up
    b = "blocks.0."
    assert torch.allclose(c[b + "resid_mid"], c[b + "resid_pre"] + c[b + "attn_out"], atol=1e-6)
    assert torch.allclose(c[b + "resid_post"], c[b + "resid_mid"] + c[b + "mlp_out"], atol=1e-6)
    assert torch.equal(c["blocks.1.resid_pre"], c["blocks.0.resid_post"])
    # full-cache forward equals the plain forward
    with torch.no_grad():
        assert (model(tokens) - logits).abs().max() < 1e-5


def test_cache_glob_and_detach(tokens):
    model = tiny_transformer()
    with model.cache("blocks.*.resid_post") as c:
        model(tokens)
    assert sorted(c) == ["blocks.0.resid_post", "blocks.1.resid_post"]
    assert not c["blocks.0.resid_post"].requires_grad
    with model.cache(["final"], detach=False) as c:
        model(tokens)
    assert c["final"].requires_grad
    with model.cache(lambda n: n.endswith(".z")) as c:
        model(tokens)
    assert sorted(c) == ["blocks.0.attn.z", "blocks.1.attn.z"]


def test_unknown_hook_name_is_named():
    model = tiny_transformer()
    with pytest.raises(KeyError, match="no hook point matches .*blocks.9"):
        with model.cache(["blocks.9.resid_post"]):
            pass
    assert all_inactive(model)


def test_replace_tensor_and_fn(tokens):
    model = tiny_transformer()
    with torch.no_grad():
        base = model(tokens)
        zero = torch.zeros(3, 12, 32)
        with model.replace({"blocks.1.attn_out": zero, "blocks.1.mlp_out": zero}), model.cache(["blocks.1.*"]) as c:
            out = model(tokens)
        assert torch.equal(c["blocks.1.resid_post"], c["blocks.1.resid_pre"])  # block 1 is a no-op now
        assert (out - base).abs().max() > 1e-4
        with model.replace({"final": lambda x: 2 * x}), model.cache(["final"]) as c2:
            doubled = model(tokens)
        # unembed is linear: doubling its input doubles the logits
        assert torch.allclose(doubled, 2 * base, atol=1e-5)
        # replacing with a broadcastable tensor: one vector for every position
        vec = torch.randn(32)
        with model.replace({"final": vec}):
            out = model(tokens)
        assert torch.allclose(out, model.unembed(vec).expand(3, 12, 23), atol=1e-6)
    assert all_inactive(model)


def test_replace_pattern_uses_explicit_path(tokens):
    model = tiny_transformer(attn_mask="bidirectional")
    uniform = torch.full((3, 4, 12, 12), 1 / 12)
    with torch.no_grad(), model.replace({"blocks.0.attn.pattern": uniform}), model.cache(["blocks.0.attn.*"]) as c:
        model(tokens)
    v_mean = c["blocks.0.attn.v"].mean(dim=1, keepdim=True).expand(-1, 12, -1, -1)
    assert torch.allclose(c["blocks.0.attn.z"], v_mean, atol=1e-6)


def test_add_steers_and_is_removed(tokens):
    model = tiny_transformer()
    with torch.no_grad():
        base_cache = {}
        with model.cache(["blocks.0.resid_post"]) as base_cache:
            base = model(tokens)
        delta = torch.randn(32)
        with model.add({"blocks.0.resid_post": delta}), model.cache(["blocks.1.resid_pre"]) as c:
            out = model(tokens)
        assert torch.allclose(c["blocks.1.resid_pre"], base_cache["blocks.0.resid_post"] + delta, atol=1e-6)
        assert (out - base).abs().max() > 1e-4
        assert torch.equal(model(tokens), base)
    assert all_inactive(model)


def test_hooks_removed_on_exception(tokens):
    model = tiny_transformer()
    with pytest.raises(RuntimeError, match="boom"):
        with model.cache(), model.add({"final": torch.ones(32)}), model.replace({"embed": lambda x: x}):
            assert not all_inactive(model)
            raise RuntimeError("boom")
    assert all_inactive(model)

    def bad(x, hp):
        raise RuntimeError(f"hook at {hp.name} failed")

    with pytest.raises(RuntimeError, match="hook at blocks.0.attn.z failed"):
        with model.hooks({"blocks.0.attn.z": bad}):
            model(tokens)
    assert all_inactive(model)


def test_nested_hooks_compose_in_order(tokens):
    model = tiny_transformer()
    seen = []
    with torch.no_grad(), model.hooks({"final": lambda x, hp: seen.append("a")}):
        with model.hooks({"final": lambda x, hp: seen.append("b")}):
            model(tokens)
        model(tokens)
    assert seen == ["a", "b", "a"]
    assert all_inactive(model)


@pytest.mark.parametrize("pos", ["learned", "rope", "alibi"])
def test_head_out_sums_to_attn_out_minus_bias(pos, tokens):
    model = tiny_transformer(positions=pos)
    with torch.no_grad(), model.cache(["blocks.*.attn.head_out", "blocks.*.attn_out"]) as c:
        with_heads = model(tokens)
    with torch.no_grad():
        plain = model(tokens)
    assert (with_heads - plain).abs().max() < 1e-5
    for i in range(2):
        b_O = model.blocks[i].attn.W_o.bias
        summed = c[f"blocks.{i}.attn.head_out"].sum(dim=2)
        assert torch.allclose(summed, c[f"blocks.{i}.attn_out"] - b_O, atol=1e-5)


def test_ablating_a_head_via_z(tokens):
    model = tiny_transformer()

    def kill_head_2(z):
        z = z.clone()
        z[:, :, 2] = 0
        return z

    with torch.no_grad():
        with model.replace({"blocks.0.attn.z": kill_head_2}), model.cache(["blocks.0.attn.head_out"]) as c:
            model(tokens)
        with model.cache(["blocks.0.attn.head_out"]) as clean:
            model(tokens)
    assert c["blocks.0.attn.head_out"][:, :, 2].abs().max() == 0
    # the other heads of the layer are the clean run's (and not zero)
    others = [0, 1, 3]
    assert torch.equal(c["blocks.0.attn.head_out"][:, :, others], clean["blocks.0.attn.head_out"][:, :, others])
    assert clean["blocks.0.attn.head_out"][:, :, 2].abs().max() > 0
