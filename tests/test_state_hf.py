"""Pretrained-scale entry of the state study on tiny random HF models (GPTNeoX = Pythia, Mamba)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dlmlab.analysis.layer_probes import collect_states, residual_layers
from dlmlab.studies.state import PRESETS
from dlmlab.studies.state.pretrained import load_local, run_pretrained

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


@pytest.mark.parametrize("kind", ["neox", "mamba"])
def test_hooks_match_hidden_states(kind, tmp_path):
    _save(kind, tmp_path)
    m = load_local(tmp_path, n_out=3).eval()
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
    with pytest.raises(ValueError, match="token ids"):
        m(torch.tensor([[40]]))


def test_run_pretrained_end_to_end(tmp_path):
    _save("neox", tmp_path / "neox")
    p = dataclasses.replace(PRESETS["smoke"], eval_lens=[40, 60], pretrained_steps=3, probe_seqs=8,
                            probe_samples=150, patch_seqs=6)
    res = run_pretrained(tmp_path / "neox", "parity", p, progress=False)
    assert set(res["acc_by_len"]) == {40, 60}
    assert len(res["probe_accuracy"]) == 3 and 0 <= res["best_layer"] <= 2
    assert res["params"] > 0 and "patching" in res and len(res["patching"]["at_last_pos"]) == 3
    # the tagging head reads the last layer, so patching it at the last position restores the clean output
    assert res["patching"]["at_last_pos"][-1] == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(FileNotFoundError, match="config.json"):
        run_pretrained(tmp_path / "missing", "parity", p, progress=False)
