"""Layer probes, direction ablation and activation patching on a toy model with a known answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dlmlab.analysis.direction_ablation import (ablation_drops, orthonormal, pca_basis, probe_basis, project_out,
                                                random_basis, tagging_accuracy)
from dlmlab.analysis.layer_probes import best_layer, collect_states, probe_layers, residual_layers
from dlmlab.analysis.patching import patch_positions
from dlmlab.interp.hooks import HookedModule, HookPoint
from dlmlab.tasks.parity import ParityTask


class _Taps(nn.Module):
    def __init__(self):
        super().__init__()
        self.resid_post = HookPoint()


class ToyParity(HookedModule):
    """embed = one-hot bit + noise dims; block 0 writes the running sign s_t = prod(1 - 2 bit) into dim 0
    (computed from the *embedding*, so patching the embedding propagates); block 1 copies; logits read dim 0."""

    def __init__(self, noise: int = 4):
        super().__init__()
        self.noise = noise
        self.embed = HookPoint()
        self.blocks = nn.ModuleList([_Taps(), _Taps()])
        self.logits = HookPoint()
        self.setup_hooks()

    def forward(self, tokens):
        B, T = tokens.shape
        gen = torch.Generator().manual_seed(int(tokens.sum()))
        e = torch.cat([nn.functional.one_hot(tokens, 2).float(), torch.randn(B, T, self.noise, generator=gen)], -1)
        e = self.embed(e)
        bit = (e[..., 1] > 0.5).float()
        s = torch.cumprod(1 - 2 * bit, dim=1)
        h = self.blocks[0].resid_post(torch.cat([s[..., None], e], -1))
        h = self.blocks[1].resid_post(h)
        return self.logits(torch.stack([h[..., 0], -h[..., 0]], -1) * 5)


@pytest.fixture(scope="module")
def data():
    return ParityTask().sample(96, 20, torch.Generator().manual_seed(0))


def test_probe_layers_find_the_state(data):
    model, (x, y) = ToyParity(), data
    names = residual_layers(model)
    assert names == ["embed", "blocks.0.resid_post", "blocks.1.resid_post"]
    assert tagging_accuracy(model, x, y) == 1.0
    probes = probe_layers(model, x, y, max_samples=1500)
    acc = [p.accuracy for p in probes]
    assert acc[0] < 0.65 and acc[1] > 0.97 and acc[2] > 0.97
    assert best_layer(acc) in (1, 2) and best_layer([0.5, 0.9, 0.902]) == 1 and best_layer([0.5, 0.9, 0.95]) == 2
    for p in probes:  # the shuffled-label control is at chance
        assert p.control_accuracy < 0.65
        assert p.selectivity == pytest.approx(p.accuracy - p.control_accuracy)
    tok = probe_layers(model, x, y, max_samples=1500, control="token")
    assert tok[0].control_accuracy > 0.97  # token-identity control is trivially decodable from the embedding
    # the probe direction at layer 1 is (close to) the state dimension
    assert abs(probes[1].probe.direction[0]) > 0.9
    with pytest.raises(ValueError, match="control"):
        probe_layers(model, x, y, control="nope")
    with pytest.raises(ValueError, match="match"):
        probe_layers(model, x, y[:, :-1])


def test_project_out_and_ablation_drops(data):
    model, (x, y) = ToyParity(), data
    basis = np.array([[1.0, 1.0, 0, 0, 0, 0, 0], [0, 1.0, 0, 0, 0, 0, 0]])
    q = orthonormal(basis)
    assert torch.allclose(q @ q.T, torch.eye(2), atol=1e-6)
    v = torch.randn(5, 7)
    pv = project_out(basis)(v)
    assert torch.allclose(pv[:, :2], torch.zeros(5, 2), atol=1e-6) and torch.allclose(pv[:, 2:], v[:, 2:])
    probes = probe_layers(model, x, y, max_samples=1500)
    sets = {20: (x, y), 30: ParityTask().sample(64, 30, torch.Generator().manual_seed(1))}
    st = collect_states(model, x, ["blocks.1.resid_post"])["blocks.1.resid_post"].flatten(0, 1)
    assert pca_basis(st, 2).shape == (2, 7) and random_basis(7, 3).shape == (3, 7)
    res = ablation_drops(model, sets, "blocks.1.resid_post",
                         {"probe": probe_basis(probes[1].probe), "noise": np.eye(7)[3:4]})
    for L in sets:
        assert res["probe"][L]["base"] == 1.0
        assert res["probe"][L]["drop"] > 0.3  # the readout direction is gone: about chance
        assert res["noise"][L]["drop"] == 0.0  # a direction the readout ignores
    with pytest.raises(ValueError):
        pca_basis(st, 0)


def test_patching_localises_the_state(data):
    model = ToyParity()
    task = ParityTask()
    clean = data[0][:32]
    corrupted = task.corrupt(clean, 5)
    a, b = task.labels(clean)[:, -1], task.labels(corrupted)[:, -1]
    res = patch_positions(model, clean, corrupted, a, b, residual_layers(model), positions=[0, 5, 19])
    r = res.recovered
    assert res.clean_gap > 0 > res.corrupt_gap
    assert r[0, 1] == pytest.approx(1.0)  # embedding at the corrupted token: recomputed state is clean
    assert r[0, 0] == pytest.approx(0.0)  # an unchanged position carries nothing
    assert r[1, 1] == pytest.approx(0.0)  # block 0 at pos 5 does not feed later positions
    assert r[1, 2] == pytest.approx(1.0) and r[2, 2] == pytest.approx(1.0)  # the state at the read-out position
    with pytest.raises(ValueError, match="nothing to recover"):
        patch_positions(model, clean, clean, a, a, ["embed"])
    with pytest.raises(ValueError, match="out of range"):
        patch_positions(model, clean, corrupted, a, b, ["embed"], positions=[40])


def test_works_on_toolkit_transformer():
    from dlmlab.models import Transformer, TransformerConfig

    torch.manual_seed(0)
    m = Transformer(TransformerConfig(vocab_size=2, n_out=2, d_model=16, n_layers=2, n_heads=2, d_mlp=32)).eval()
    x, y = ParityTask().sample(16, 12, torch.Generator().manual_seed(0))
    probes = probe_layers(m, x, y, max_samples=150, max_iter=50)
    assert [p.layer for p in probes] == [0, 1, 2]
    res = patch_positions(m, x, ParityTask().corrupt(x, 3), y[:, -1], 1 - y[:, -1], ["blocks.1.resid_post"],
                          positions=[11])
    assert res.recovered[0, 0] == pytest.approx(1.0, abs=1e-4)  # last layer at the read-out position


def test_probe_records_non_convergence_instead_of_warning():
    import warnings

    from dlmlab.analysis.probes import probe_classification

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 8))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int) + (X[:, 2] > 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ConvergenceWarning escaping would fail here
        short = probe_classification(X, y, max_iter=1)
        full = probe_classification(X, y, max_iter=500)
    assert not short.converged
    assert full.converged
