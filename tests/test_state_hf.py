"""Pretrained-scale entry of the state study: tiny random HF models (GPTNeoX = Pythia, Mamba) and the
small models pretrain_small trains and saves."""

from __future__ import annotations

import dataclasses
import json
import math
import types

import pytest
import torch

from dlmlab.analysis.layer_probes import collect_states, residual_layers
from dlmlab.errors import UserError
from dlmlab.studies.state import PRESETS
from dlmlab.studies.state import pretrain_small as ps
from dlmlab.studies.state.pretrained import HFTagger, load_local, run_pretrained

transformers = pytest.importorskip("transformers")


def _save(kind: str, path) -> None:
    torch.manual_seed(0)
    if kind == "neox":
        cfg = transformers.GPTNeoXConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=256)
        transformers.GPTNeoXModel(cfg).save_pretrained(path)
    else:
        cfg = transformers.MambaConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2, state_size=4, expand=2)
        transformers.MambaModel(cfg).save_pretrained(path)


def _tiny(**kw):
    return dataclasses.replace(PRESETS["smoke"], eval_lens=[40, 60], pretrained_steps=3, probe_seqs=8,
                               probe_samples=150, patch_seqs=6, **kw)


def _eval_sets(p) -> dict:
    """{length: (tokens, labels)} of the parity task's evaluation sets, as run_pretrained builds them."""
    from dlmlab.studies.state.cells import eval_data, make_task

    patch_tasks = list(p.patch_tasks) + ([] if "parity" in p.patch_tasks else ["parity"])
    return eval_data(make_task("parity", p), dataclasses.replace(p, patch_tasks=patch_tasks)).by_len


@pytest.mark.parametrize("kind", ["neox", "mamba"])
def test_hooks_match_hidden_states(kind, tmp_path):
    _save(kind, tmp_path)
    m = load_local(tmp_path, n_out=3).eval()
    assert isinstance(m, HFTagger)  # the former name still works
    x = torch.randint(0, 6, (2, 9), generator=torch.Generator().manual_seed(0))
    names = residual_layers(m)
    assert names == ["embed", "blocks.0.resid_post", "blocks.1.resid_post"]
    st = collect_states(m, x, names + ["final"])
    with torch.no_grad():
        out = m.base(input_ids=x, output_hidden_states=True)
    hs = out.hidden_states
    # GPTNeoX: (embeddings, layer 0, ..., normed last); Mamba: (layer 0, ..., normed last)
    first = 1 if kind == "neox" else 0
    if kind == "neox":
        torch.testing.assert_close(st["embed"], hs[0])
    torch.testing.assert_close(st["blocks.0.resid_post"], hs[first])
    torch.testing.assert_close(st["final"], out.last_hidden_state)
    norm = m.base.final_layer_norm if kind == "neox" else m.base.norm_f
    torch.testing.assert_close(norm(st["blocks.1.resid_post"]), out.last_hidden_state)
    # interventions reach the model: zeroing layer 0 changes the logits
    with torch.no_grad():
        y = m(x)
        with m.replace({"blocks.0.resid_post": lambda a: a * 0}):
            y0 = m(x)
    assert y.shape == (2, 9, 3) and (y - y0).abs().max() > 1e-3
    with pytest.raises(ValueError, match="token id"):
        m(torch.tensor([[40]]))


def test_run_pretrained_end_to_end(tmp_path):
    _save("neox", tmp_path / "neox")
    p = _tiny()
    res = run_pretrained(tmp_path / "neox", "parity", p, progress=False)
    assert set(res["acc_by_len"]) == {40, 60} and res["arch"] == "gpt_neox" and "pretrain" not in res
    acc = res["probe_accuracy"]
    assert len(acc) == 3 and res["best_layer"] == min(i for i, a in enumerate(acc) if a >= max(acc) - 0.005)
    # every parameter of the checkpoint plus the tagging head (hidden x classes + bias), counted from the files
    base = sum(t.numel() for t in transformers.GPTNeoXModel.from_pretrained(tmp_path / "neox").parameters())
    n_classes = len(torch.unique(torch.cat([y.flatten() for _, y in _eval_sets(p).values()])))
    assert res["params"] == base + 32 * n_classes + n_classes
    assert len(res["patching"]["at_last_pos"]) == 3
    # the tagging head reads the last layer, so patching it at the last position restores the clean output
    assert res["patching"]["at_last_pos"][-1] == pytest.approx(1.0, abs=1e-4)
    # layer ablations: per block and length, with the per-layer random-subspace control
    ab = res["block_ablation"]
    assert set(ab) == {"base", "skip", "mixer_mean"} and all(len(v) == 2 for v in ab["skip"].values())
    assert len(res["layer_random_drop"]) == len(res["layer_ablation_drop"]) == 3
    assert ab["base"] == res["acc_by_len"]  # the unablated model on the same sets: the same accuracies
    sm = res["summary"]
    assert all(v is None or isinstance(v, (int, float)) for v in sm.values())
    # the summary's read-outs, recomputed from the nested results they summarise
    rises = [b - a for a, b in zip(acc, acc[1:])]
    j = rises.index(max(rises))
    drops, ctrl = res["layer_ablation_drop"], res["layer_random_drop"]
    k = drops.index(max(drops))
    ll = res["last_layer_patching"]
    assert sm == pytest.approx({
        "chance": sm["chance"], "acc@60": res["acc_by_len"][60], "probe_jump_layer": j + 1, "probe_jump": rises[j],
        "causal_layer": k, "causal_drop": drops[k], "causal_control": ctrl[k], "skip_last": ab["skip"][40][-1],
        "mixer_mean_last": ab["mixer_mean"][40][-1], "patch_last_pre@corrupt": ll["at_corrupt_pos"][0],
        "patch_last_mixer@last": ll["at_last_pos"][1]}, abs=0)
    y40 = _eval_sets(p)[40][1].flatten()  # chance: the majority label's rate at the training length
    assert sm["chance"] == pytest.approx(torch.bincount(y40).max().item() / y40.numel(), abs=1e-12)
    # last-layer patching at every position: before the corrupted token the clean and corrupted runs are
    # the same (causal models), so patching there recovers nothing
    assert ll["hooks"] == ["blocks.1.resid_pre", "blocks.1.mixer_out"] and ll["positions"] == list(range(40))
    c = ll["corrupt_pos"]
    assert all(abs(r) < 1e-6 for row in ll["recovered"] for r in row[:c])
    json.dumps(res)  # JSON-able (keys of acc_by_len become strings)
    with pytest.raises(FileNotFoundError, match="config.json"):
        run_pretrained(tmp_path / "missing", "parity", p, progress=False)
    with pytest.raises(UserError, match="config.json"):
        run_pretrained(tmp_path / "missing", "parity", p, progress=False)


def test_skipping_a_block_is_the_identity_layer(tmp_path):
    from dlmlab.studies.state.pretrained import _skip_block

    _save("mamba", tmp_path)
    m = load_local(tmp_path, n_out=3).eval()
    x = torch.randint(0, 6, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), _skip_block(m, 1), m.cache(["blocks.1.resid_pre", "blocks.1.resid_post"]) as c:
        m(x)
    torch.testing.assert_close(c["blocks.1.resid_post"], c["blocks.1.resid_pre"])


def test_pretrain_small_smoke_saves_reuses_and_runs(tmp_path, monkeypatch):
    p = types.SimpleNamespace(pretrain_small="smoke", seed=0)
    paths = ps.pretrain_small_models(p, tmp_path / "a", progress=False)
    assert [pth.rsplit("/", 1)[-1] for pth in paths] == ["gpt_neox-smoke", "mamba-smoke"]
    for pth, cls in zip(paths, ("GPTNeoXForCausalLM", "MambaForCausalLM")):
        cfg = json.loads((tmp_path / "a" / pth.rsplit("/", 1)[-1] / "config.json").read_text())
        assert cfg["architectures"] == [cls] and cfg["vocab_size"] == ps.BYTE_VOCAB
        rec = ps.pretrain_record(pth)
        assert rec["seed"] == 0 and rec["recipe"] == "smoke"
        assert rec["uniform_bits_per_byte"] == math.log2(ps.BYTE_VOCAB) == 8.0  # one byte: 8 bits, uniformly
        assert rec["val_bits_per_byte"] < rec["uniform_bits_per_byte"]  # it learned something about the text
    # the saved LM reloads with its own head (logits over the bytes)
    from dlmlab.models.hf_hooked import load_hf_hooked

    lm = load_hf_hooked(paths[1])
    assert lm(torch.tensor([list(b"To be")])).shape == (1, 5, ps.BYTE_VOCAB)
    # deterministic from the seed
    again = ps.pretrain_small_models(p, tmp_path / "b", progress=False)
    for x, y in zip(paths, again):
        from safetensors.torch import load_file

        wx, wy = load_file(f"{x}/model.safetensors"), load_file(f"{y}/model.safetensors")
        assert wx.keys() == wy.keys() and all(torch.equal(wx[k], wy[k]) for k in wx)
    # finished folders are reused; another seed retrains
    calls = []
    real = ps.pretrain_one
    monkeypatch.setattr(ps, "pretrain_one", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    assert ps.pretrain_small_models(p, tmp_path / "a", progress=False) == paths and calls == []
    ps.pretrain_small_models(types.SimpleNamespace(pretrain_small="smoke", seed=1), tmp_path / "a", progress=False)
    assert calls == ["gpt_neox", "mamba"] and ps.pretrain_record(paths[0])["seed"] == 1
    # the same fine-tune and analyses run on both through the local-path loader
    for pth, arch in zip(paths, ("gpt_neox", "mamba")):
        res = run_pretrained(pth, "parity", _tiny(), progress=False)
        assert res["arch"] == arch and res["pretrain"]["recipe"] == "smoke"
        assert len(res["probe_accuracy"]) == 3
        ll = res["last_layer_patching"]  # causal models: patching before the corrupted token recovers nothing
        assert ll["hooks"][0] == "blocks.1.resid_pre" and ll["corrupt_pos"] > 0
        assert all(abs(r) < 1e-6 for row in ll["recovered"] for r in row[:ll["corrupt_pos"]])
        assert res["summary"]["pretrain_bits_per_byte"] == res["pretrain"]["val_bits_per_byte"]


def test_pretrain_small_refuses(tmp_path):
    with pytest.raises(UserError, match="pretrain_small"):
        ps.pretrain_small_models(types.SimpleNamespace(pretrain_small="huge", seed=0), tmp_path, progress=False)
    (tmp_path / "gpt_neox-smoke").mkdir()
    with pytest.raises(UserError, match="not a dlmlab pretraining output"):
        ps.pretrain_small_models(types.SimpleNamespace(pretrain_small="smoke", seed=0), tmp_path, progress=False)
    with pytest.raises(UserError, match="n_heads"):
        ps.PretrainRecipe(d_model=30, n_heads=4)
