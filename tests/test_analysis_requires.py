"""Analyses state what they need: attention analyses refuse other families in one clear line;
analyses of the residual protocol run on every family."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlmlab.analysis import ablation, circuits, head_sets, heads, induction, timestep
from dlmlab.analysis.attention_correlation import score_correlation
from dlmlab.analysis.gradient_alignment import parameter_gradient_cosine, per_query_gradient_cosine, storage_modules
from dlmlab.analysis.layers import residual_layers
from dlmlab.analysis.requires import LayerOutOfRange, UnsupportedModel, require_hooks
from dlmlab.analysis.reversal import query_eval
from dlmlab.analysis.storage_routing import attention_scores, storage_matrix, storage_routing
from dlmlab.errors import UserError, user_message
from dlmlab.hooks import HookedModule, HookPoint
from dlmlab.models.factory import build_model
from dlmlab.tasks.relations import Queries

V, MASK = 10, 9
NAMES = {"mamba": "a Mamba", "mamba2": "a Mamba-2", "lstm": "an LSTM", "gru": "a GRU"}


def _model(family: str):
    torch.manual_seed(0)
    return build_model(family, vocab_size=V, d_model=16, n_layers=2, match_params=False).eval()


def _tokens(B: int = 8, T: int = 12, seed: int = 0) -> torch.Tensor:
    half = torch.randint(0, MASK, (B, T // 2), generator=torch.Generator().manual_seed(seed))
    return torch.cat([half, half], 1)  # repeated halves (induction rows need them)


def _queries() -> Queries:
    toks = _tokens(4, 6)
    n = toks.shape[0]
    return Queries(toks, torch.full((n,), 5), toks[:, 0].clone(), torch.zeros(n, dtype=torch.long))


# each refusal names the public function called (issue 30: not diagonal_scores when previous_token_scores was called)
ATTENTION_CALLS = {
    "head_means": lambda m: ablation.head_means(m, _tokens()),
    "ablate_heads": lambda m: ablation.ablate_heads(m, [(0, 0)]).__enter__(),
    "ablation_effects": lambda m: ablation.ablation_effects(m, lambda mm: 0.0, "zero"),
    "set_ablation_test": lambda m: head_sets.set_ablation_test(m, lambda mm: 0.0, [(0, 0)], [(0, 0), (0, 1)],
                                                               kind="zero"),
    "attention_patterns": lambda m: heads.attention_patterns(m, _tokens()),
    "attention_to": lambda m: heads.attention_to(m, _tokens(2), torch.tensor([1, 2]), torch.tensor([0, 0])),
    "previous_token_scores": lambda m: heads.previous_token_scores(m, _tokens()),
    "dlm_induction_scores": lambda m: induction.dlm_induction_scores(m, _tokens(), MASK),
    "ar_induction_scores": lambda m: induction.ar_induction_scores(m, _tokens()),
    "qk_circuit": lambda m: circuits.qk_circuit(m, 0),
    "ov_circuit": lambda m: circuits.ov_circuit(m, 0),
    "composition_scores": lambda m: circuits.composition_scores(m, "Q"),
    "copying_scores": lambda m: circuits.copying_scores(m),
    "attention_scores": lambda m: attention_scores(m, _tokens()),
    "storage_routing": lambda m: storage_routing(m, _queries()),
    "storage_matrix": lambda m: storage_matrix(m, torch.arange(3)),
    "score_correlation": lambda m: score_correlation(m, _queries(), _queries()),
    "per_query_gradient_cosine": lambda m: per_query_gradient_cosine(m, _queries(), _queries()),
}


@pytest.mark.parametrize("family", list(NAMES))
@pytest.mark.parametrize("analysis", list(ATTENTION_CALLS))
def test_attention_analyses_refuse_other_families_clearly(family, analysis):
    m = _model(family)
    with pytest.raises(UnsupportedModel) as e:
        ATTENTION_CALLS[analysis](m)
    msg = str(e.value)
    assert msg == f"{analysis} needs an attention model (blocks.{{i}}.attn); got {NAMES[family]}"
    assert user_message(e.value) == msg and isinstance(e.value, UserError) and isinstance(e.value, TypeError)


@pytest.mark.parametrize("analysis", list(ATTENTION_CALLS))
def test_attention_analyses_still_run_on_a_transformer(analysis):
    m = build_model("transformer", vocab_size=V, d_model=16, n_layers=2, match_params=False, max_seq_len=16,
                    attn_mask="bidirectional").eval()
    ATTENTION_CALLS[analysis](m)


def test_layer_and_transformer_requirements():
    m = build_model("transformer", vocab_size=V, d_model=16, n_layers=2, match_params=False).eval()
    with pytest.raises(LayerOutOfRange, match="^layer 2 out of range for a model with 2 layers$"):
        circuits.qk_circuit(m, 2)
    with pytest.raises(ValueError, match="layer -1 out of range"):
        storage_matrix(m, torch.arange(3), layer=-1)
    assert list(storage_modules(m, 1)) == ["blocks.1.attn.W_v", "blocks.1.attn.W_o"]


@pytest.mark.parametrize("family", ["transformer"] + list(NAMES))
def test_residual_analyses_run_on_every_family(family):
    m = _model(family)
    x = _tokens(8, 12)
    assert residual_layers(m) == ["blocks.0.resid_pre", "blocks.0.resid_post", "blocks.1.resid_post"]
    assert residual_layers(m, start="embed") == ["embed", "blocks.0.resid_post", "blocks.1.resid_post"]
    rep = timestep.mask_rate_probe(m, x, MASK, positions_per_seq=2)
    assert rep.points == residual_layers(m) and len(rep.r2) == 3 and np.isfinite(rep.r2).all()
    out = timestep.patch_mask_rate(m, x, MASK, "blocks.0.resid_post", rep.directions[1])
    assert np.isfinite(out["delta"])
    out = timestep.mean_shift_patch(m, x, MASK, point="blocks.1.mixer_out", n_random=2)
    assert np.isfinite(out["delta"]) and len(out["random_deltas"]) == 2
    assert 0.0 <= induction.dlm_accuracy(m, x, MASK, "forward") <= 1.0
    assert 0.0 <= induction.ar_accuracy(m, x, "forward") <= 1.0
    assert set(query_eval(m, _queries(), exclude=(MASK,))) == {"acc", "p_correct", "nll", "rank"}
    assert parameter_gradient_cosine(m, _queries(), _queries()) == pytest.approx(1.0, abs=1e-4)  # same queries


def test_missing_hook_points_are_named():
    m = _model("mamba")
    with pytest.raises(UnsupportedModel, match=r"^patch_mask_rate needs the hook point blocks\.0\.attn\.z; "
                                               r"got a Mamba without it$"):
        timestep.patch_mask_rate(m, _tokens(), MASK, "blocks.0.attn.z", np.ones(16))
    with pytest.raises(UnsupportedModel, match=r"needs the hook points a, b \(why\); got a Mamba without them"):
        require_hooks(m, ["a", "b", "blocks.*.mixer_out"], "x", "why")
    with pytest.raises(UnsupportedModel, match="needs a hooked dlmlab model"):
        require_hooks(torch.nn.Linear(2, 2), ["embed"], "x")


def test_residual_layers_on_a_wrapper_without_resid_pre():
    class Wrapper(HookedModule):  # like a Hugging Face wrapper exposing embed + resid_post only
        def __init__(self, with_embed: bool):
            super().__init__()
            if with_embed:
                self.embed = HookPoint()
            self.blocks = torch.nn.ModuleList([torch.nn.Module() for _ in range(2)])
            for b in self.blocks:
                b.resid_post = HookPoint()
            self.setup_hooks()

    assert residual_layers(Wrapper(True)) == ["embed", "blocks.0.resid_post", "blocks.1.resid_post"]
    assert residual_layers(Wrapper(False), start="embed") == ["blocks.0.resid_post", "blocks.1.resid_post"]
    with pytest.raises(UnsupportedModel, match=r"residual layers need 'blocks\.\{i\}\.resid_post' hook points"):
        residual_layers(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("family", ["transformer"] + list(NAMES))
def test_mixer_ablation_on_every_family(family):
    m = _model(family)
    x = _tokens(4, 12)
    means = ablation.mixer_means(m, x)
    assert set(means) == {0, 1} and means[1].shape == (12, 16)
    assert ablation.mixer_means(m, x, per_position=False)[0].shape == (16,)
    with torch.no_grad():
        y = m(x)
        with ablation.ablate_mixers(m, [1], "mean", means), \
                m.cache(["blocks.1.mixer_out", "blocks.1.resid_post"]) as c:  # cache after the ablation hook
            y_mean = m(x)
        with ablation.ablate_mixers(m, [0, 1], "zero"):
            y_zero = m(x)
    torch.testing.assert_close(c["blocks.1.mixer_out"], means[1].expand(4, -1, -1))
    if not m.residual_stream:  # plain LSTM / GRU: the last layer's output is the mean itself
        torch.testing.assert_close(c["blocks.1.resid_post"], c["blocks.1.mixer_out"])
    assert not torch.allclose(y_mean, y) and not torch.allclose(y_zero, y)
    with pytest.raises(LayerOutOfRange, match="layer 2 out of range for a model with 2 layers"):
        ablation.ablate_mixers(m, [2]).__enter__()
    with pytest.raises(ValueError, match="mean ablation needs means=mixer_means"):
        ablation.ablate_mixers(m, [0], "mean").__enter__()
