"""Analyses state what they need: attention analyses refuse other families in one clear line;
analyses of the residual protocol run on every family."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dlmlab.analysis import ablation, circuits, head_sets, heads, induction, timestep
from dlmlab.studies.reversal.attention_correlation import score_correlation
from dlmlab.studies.reversal.gradient_alignment import (parameter_gradient_cosine, per_query_gradient_cosine,
                                                        storage_modules)
from dlmlab.analysis.layers import residual_layers
from dlmlab.analysis.requires import LayerOutOfRange, UnsupportedModel, require_hooks
from dlmlab.studies.reversal.queries import query_eval
from dlmlab.studies.reversal.storage_routing import attention_scores, storage_matrix, storage_routing
from dlmlab.errors import UserError, user_message
from dlmlab.interp.hooks import HookedModule, HookPoint
from dlmlab.models.factory import build_model
from dlmlab.objectives.mdlm import log_probs_no_mask
from dlmlab.tasks.relations import Queries
from value_util import entropy_no_mask_f64

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
    """Each analysis runs on a transformer and gives its value: checked against a value known by construction
    (the cached activations, a constant metric, a thing compared with itself) where there is one, else
    the same numbers from a second call."""
    torch.manual_seed(0)
    m = build_model("transformer", vocab_size=V, d_model=16, n_layers=2, match_params=False, max_seq_len=16,
                    attn_mask="bidirectional").eval()
    if analysis == "ablate_heads":  # zeroing head (0, 0) changes the logits while the ablation holds, and only then
        x = _tokens()
        clean = m(x)
        with ablation.ablate_heads(m, [(0, 0)]):
            assert not torch.allclose(m(x), clean)
        assert torch.equal(m(x), clean)
        return
    result = ATTENTION_CALLS[analysis](m)
    check = VALUE_CHECKS.get(analysis)
    if check is not None:
        check(m, result)
    else:
        again = ATTENTION_CALLS[analysis](m)
        a, b = (_numbers(r) for r in (result, again))
        assert a and all(torch.equal(u, v) for u, v in zip(a, b)) and all(bool(torch.isfinite(u).all()) for u in a)


def _numbers(x) -> list[torch.Tensor]:
    """The tensors of an analysis result (a tensor, a dict / tuple of them, or a dataclass holding them)."""
    import dataclasses

    if isinstance(x, torch.Tensor):
        return [x.detach().double()]
    if isinstance(x, dict):
        return [t for k in sorted(x) for t in _numbers(x[k])]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _numbers(v)]
    if dataclasses.is_dataclass(x):
        return [t for f in dataclasses.fields(x) for t in _numbers(getattr(x, f.name))]
    return [torch.tensor(float(x), dtype=torch.float64)] if isinstance(x, (int, float)) else []


def _cached(m, name: str) -> torch.Tensor:
    return m.run_with_cache(_tokens())[1][name]


VALUE_CHECKS = {
    # head_means: each head's output z averaged over the batch, as the cache holds it
    "head_means": lambda m, r: [torch.testing.assert_close(r[L], _cached(m, f"blocks.{L}.attn.z").mean(0),
                                                           rtol=0, atol=0) for L in (0, 1)],
    # a constant metric: no head changes it
    "ablation_effects": lambda m, r: (r[0] == 0.0 and torch.equal(r[1], torch.zeros(2, 4))) or pytest.fail(str(r)),
    "set_ablation_test": lambda m, r: (r.base == 0.0 and r.drop == 0.0) or pytest.fail(str(r)),
    # the cached patterns themselves, rows summing to 1
    "attention_patterns": lambda m, r: [torch.testing.assert_close(r[L], _cached(m, f"blocks.{L}.attn.pattern"),
                                                                   rtol=0, atol=0) for L in (0, 1)]
    + [torch.testing.assert_close(r[0].sum(-1), torch.ones(8, 4, 12))],
    # the mean attention to the position before, read off the patterns
    "previous_token_scores": lambda m, r: torch.testing.assert_close(
        r, torch.stack([_cached(m, f"blocks.{L}.attn.pattern").diagonal(-1, -2, -1).mean((0, 2)) for L in (0, 1)]),
        rtol=0, atol=0),
    # pre-softmax scores: their softmax is layer 0's pattern
    "attention_scores": lambda m, r: torch.testing.assert_close(r.softmax(-1), _cached(m, "blocks.0.attn.pattern")),
    # the same queries twice: every correlation / cosine is 1
    "score_correlation": lambda m, r: torch.testing.assert_close(r.per_head, torch.ones(4, dtype=torch.float64)),
    "per_query_gradient_cosine": lambda m, r: torch.testing.assert_close(r.double(), torch.ones(4,
                                                                                               dtype=torch.float64)),
}


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
    assert timestep.mask_rate_probe(m, x, MASK, positions_per_seq=2).r2 == rep.r2  # the same seed, the same numbers
    out = timestep.patch_mask_rate(m, x, MASK, "blocks.0.resid_post", rep.directions[1])
    # the clean entropy recomputed in float64 at the positions the seeded generator masks (its first draw: u < low)
    masked = torch.rand(x.shape, generator=torch.Generator().manual_seed(0)) < 0.15
    with torch.no_grad():
        logits = m(torch.where(masked, torch.full_like(x, MASK), x))
    want = [entropy_no_mask_f64(logits[b, t], MASK) for b, t in masked.nonzero().tolist()]
    assert out["n_masked"] == len(want) > 0
    assert out["entropy_clean"] == pytest.approx(sum(want) / len(want), rel=1e-5)
    assert out["delta"] == out["entropy_patched"] - out["entropy_clean"] != 0.0  # the patch reaches the outputs
    out = timestep.mean_shift_patch(m, x, MASK, point="blocks.1.mixer_out", n_random=2)
    assert np.isfinite(out["delta"]) and len(out["random_deltas"]) == 2
    assert out == timestep.mean_shift_patch(m, x, MASK, point="blocks.1.mixer_out", n_random=2)  # seeded
    # accuracies recomputed row by row: the masked rows one at a time; the AR's prediction of target k from the
    # prefix x[:, :k] alone (so it also checks that the model is causal)
    rows = induction.build_rows(x, MASK, "forward")
    with torch.no_grad():
        hits = [float(log_probs_no_mask(m(rows.noisy[i:i + 1])[0, k], MASK).argmax() == rows.tokens[i, k])
                for i, k in enumerate(rows.target.tolist())]
        lo, hi = induction.target_range(6, "forward")
        ar_hits = [float(m(x[b:b + 1, :k])[0, -1].argmax() == x[b, k]) for b in range(8) for k in range(lo, hi)]
    assert induction.dlm_accuracy(m, x, MASK, "forward") == pytest.approx(sum(hits) / len(hits), abs=1e-12)
    assert induction.ar_accuracy(m, x, "forward") == pytest.approx(sum(ar_hits) / len(ar_hits), abs=1e-12)
    q = _queries()
    assert query_eval(m, q, exclude=(MASK,)) == pytest.approx(_query_eval_f64(m, q, MASK), rel=1e-6, abs=1e-9)
    assert parameter_gradient_cosine(m, _queries(), _queries()) == pytest.approx(1.0, abs=1e-4)  # same queries


def _query_eval_f64(m, q, mask_id: int) -> dict:
    """query_eval recomputed query by query in float64: accuracy, p(target), NLL, rank (mask excluded)."""
    acc = p = nll = rank = 0.0
    with torch.no_grad():
        for i in range(len(q)):
            z = m(q.tokens[i:i + 1])[0, int(q.query_pos[i])].double()
            z[mask_id] = float("-inf")
            lp = z.log_softmax(-1)
            t = int(q.target[i])
            r = sum(1 for v in lp.tolist() if v > lp[t])
            acc, p, nll, rank = acc + (r == 0), p + math.exp(lp[t]), nll - float(lp[t]), rank + r
    n = len(q)
    return {"acc": acc / n, "p_correct": p / n, "nll": nll / n, "rank": rank / n}


def _pattern_model():
    return build_model("transformer", vocab_size=V, d_model=16, n_layers=2, match_params=False, max_seq_len=16).eval()


def test_previous_token_scores_of_heads_set_to_known_patterns():
    """Layer 0's heads forced to known patterns: head 0 attends to the previous token (score 1.0), head 1 uniformly
    over the causal prefix (score mean over q >= 1 of 1 / (q + 1)), head 2 to itself (0.0); permuting the heads
    permutes the scores."""
    m, x = _pattern_model(), _tokens(3, 12)
    T = x.shape[1]
    prev = torch.diag(torch.ones(T - 1), -1)
    prev[0, 0] = 1.0
    uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    heads_ = [prev, uniform, torch.eye(T), uniform]

    def force(order):
        return {"blocks.0.attn.pattern": lambda a, hp: torch.stack([heads_[h] for h in order])[None].expand_as(a)}

    with m.hooks(force([0, 1, 2, 3])):
        s = heads.previous_token_scores(m, x)
    want = sum(1 / (q + 1) for q in range(1, T)) / (T - 1)
    assert s[0].tolist() == pytest.approx([1.0, want, 0.0, want], abs=1e-6)
    with m.hooks(force([2, 0, 3, 1])):
        assert heads.previous_token_scores(m, x)[0].tolist() == pytest.approx([0.0, 1.0, want, want], abs=1e-6)


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
