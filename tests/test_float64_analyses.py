"""Float64 models keep float64 through the analyses and the layers that used to round to float32.

Each test compares with an independent float64 computation to 1e-12; float32 rounding anywhere
on the way shows as ~1e-8 differences.
"""

from __future__ import annotations

import math

import torch

from conftest import tiny_transformer
from dlmlab.analysis import ablation, fold
from dlmlab.analysis.direction_ablation import project_out
from dlmlab.analysis.heads import attention_patterns
from dlmlab.studies.reversal.queries import query_log_probs
from dlmlab.studies.reversal.storage_routing import attention_scores, storage_routing
from dlmlab.models.mamba2 import GatedRMSNorm
from dlmlab.models.norm import RMSNorm
from dlmlab.models.positions import rope_cos_sin
from dlmlab.tasks.relations import Queries

TOL = dict(atol=1e-12, rtol=1e-12)


def _tokens(n: int = 5, T: int = 12, seed: int = 7) -> torch.Tensor:
    return torch.randint(0, 23, (n, T), generator=torch.Generator().manual_seed(seed))


def _model(**kw):
    return tiny_transformer(**kw).double()


def _cached(model, names, tokens):
    with torch.no_grad(), model.cache(names) as c:
        model(tokens)
    return dict(c.items())


def test_head_means_keep_float64():
    m, x = _model(), _tokens()
    z = _cached(m, "blocks.*.attn.z", x)
    for per_position in (True, False):
        means = ablation.head_means(m, x, per_position=per_position, chunk=2)  # three chunks of rows
        for layer in range(2):
            zl = z[f"blocks.{layer}.attn.z"]  # [B,T,H,dh]
            want = zl.mean(0) if per_position else zl.mean((0, 1))
            assert means[layer].dtype == torch.float64
            torch.testing.assert_close(means[layer], want, **TOL)


def test_ablation_drops_keep_float64():
    m, x = _model(), _tokens()

    def metric(model):
        return float(model(x).pow(2).sum())  # O(1e3): float32 storage would round at ~1e-4

    base, drop = ablation.ablation_effects(m, metric, "zero")
    for layer, head in [(0, 1), (1, 3)]:
        with ablation.ablate_heads(m, [(layer, head)], "zero"), torch.no_grad():
            want = base - metric(m)
        assert abs(float(drop[layer, head]) - want) <= 1e-12 * max(1.0, abs(want))


def test_rope_tables_are_float64():
    pos, d, theta = torch.arange(50), 8, 10000.0
    cos, sin = rope_cos_sin(pos, d, theta, torch.float64)
    for p in (1, 17, 49):
        for i in range(d // 2):
            ang = p * theta ** (-2 * i / d)
            for col in (i, i + d // 2):
                assert abs(float(cos[p, col]) - math.cos(ang)) <= 1e-12
                assert abs(float(sin[p, col]) - math.sin(ang)) <= 1e-12


def _rope_scores(m, x):
    """Pre-softmax causal scores [B,H,T,T] of layer 0, rotated here from the hooked q, k (float64)."""
    c = _cached(m, ["blocks.0.attn.q", "blocks.0.attn.k"], x)
    q, k = c["blocks.0.attn.q"], c["blocks.0.attn.k"]  # [B,T,H,dh], before RoPE
    T, dh = q.shape[1], q.shape[-1]
    half = dh // 2
    ang = torch.tensor([[t * m.cfg.rope_theta ** (-2 * i / dh) for i in range(half)] for t in range(T)],
                       dtype=torch.float64)[None, :, None, :]  # [1,T,1,half]

    def rot(v):
        a, b = v[..., :half], v[..., half:]
        return torch.cat([a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()], -1)

    scores = torch.einsum("bthd,bshd->bhts", rot(q), rot(k)) / math.sqrt(dh)
    return scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))


def _rope_model():
    return _model(positions="rope", max_seq_len=40), _tokens(2, 40)


def test_rope_model_attention_is_float64():
    """A float64 RoPE model's attention pattern equals softmax(rot(q) rot(k)^T / sqrt(dh)) computed here."""
    m, x = _rope_model()
    pattern = _cached(m, "blocks.0.attn.pattern", x)["blocks.0.attn.pattern"]
    torch.testing.assert_close(pattern, _rope_scores(m, x).softmax(-1), **TOL)


def test_alibi_model_attention_is_float64():
    """A float64 ALiBi model's pattern equals softmax(q k^T / sqrt(dh) - slope_h |i - j|), slopes from the formula."""
    m, x = _model(positions="alibi", n_heads=16), _tokens(2, 20)  # slopes 2^(-h/2): not exact in float32
    c = _cached(m, ["blocks.0.attn.q", "blocks.0.attn.k", "blocks.0.attn.pattern"], x)
    q, k = c["blocks.0.attn.q"], c["blocks.0.attn.k"]  # [B,T,H,dh]
    H, T, dh = q.shape[2], q.shape[1], q.shape[-1]
    slopes = torch.tensor([2 ** (-8 * (h + 1) / H) for h in range(H)], dtype=torch.float64)  # H a power of 2
    dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs().double()
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(dh) - slopes[:, None, None] * dist
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(c["blocks.0.attn.pattern"], scores.softmax(-1), **TOL)


def test_attention_patterns_keep_float64():
    m, x = _rope_model()
    torch.testing.assert_close(attention_patterns(m, x)[0], _rope_scores(m, x).softmax(-1), **TOL)


def test_attention_scores_keep_float64():
    m, x = _rope_model()
    torch.testing.assert_close(attention_scores(m, x, 0), _rope_scores(m, x), **TOL)


def test_storage_routing_probs_keep_float64():
    m, x = _model(), _tokens(3, 6)
    q = Queries(x, torch.tensor([5, 2, 4]), torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2]))
    with torch.no_grad():
        want = m(x)[torch.arange(3), q.query_pos].softmax(-1)
    torch.testing.assert_close(storage_routing(m, q).probs, want, **TOL)


def test_query_log_probs_keep_float64():
    m, x = _model(), _tokens(3, 6)
    q = Queries(x, torch.tensor([5, 2, 4]), torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2]))
    with torch.no_grad():
        want = m(x)[torch.arange(3), q.query_pos].log_softmax(-1)
        torch.testing.assert_close(query_log_probs(m, q), want, **TOL)


def test_project_out_keeps_float64():
    g = torch.Generator().manual_seed(2)
    basis = torch.randn(3, 16, dtype=torch.float64, generator=g)
    x = torch.randn(5, 16, dtype=torch.float64, generator=g)
    left = project_out(basis)(x)
    torch.testing.assert_close(left @ basis.T, torch.zeros(5, 3, dtype=torch.float64), **TOL)
    # and what was removed lies in the span: least squares of x on the basis
    coef = torch.linalg.lstsq(basis.T, x.T).solution  # [3, 5]
    torch.testing.assert_close(x - left, (basis.T @ coef).T, **TOL)


def _std(v: torch.Tensor, eps: float, center: bool) -> float:
    if center:
        v = v - v.mean(-1, keepdim=True)
    return float((v.pow(2).mean(-1) + eps).sqrt().mean())


def test_norm_scales_keep_float64():
    m, x = _model(), _tokens()
    c = _cached(m, ["blocks.*.resid_pre", "blocks.*.resid_mid", "blocks.1.resid_post"], x)
    eps = m.cfg.norm_eps
    want = {"ln_final": _std(c["blocks.1.resid_post"], eps, True)}
    for i in range(2):
        want[f"blocks.{i}.ln1"] = _std(c[f"blocks.{i}.resid_pre"], eps, True)
        want[f"blocks.{i}.ln2"] = _std(c[f"blocks.{i}.resid_mid"], eps, True)
    got = fold.norm_scales(m, x)
    assert set(got) == set(want)
    for name, s in want.items():
        assert abs(got[name] - s) <= 1e-12 * s, name


def test_fold_gap_keeps_float64():
    """fold_gap's numbers equal a float64 computation; the folded model equals its frozen-scale copy to round-off."""
    m, x = _model(), _tokens()
    scales = fold.norm_scales(m, x)
    frozen, folded = fold.freeze_norm_scales(m, scales), fold.fold_ln_frozen_scale(m, scales)
    with torch.no_grad():
        a, b = m(x), folded(x)
    la, lb = a.log_softmax(-1), b.log_softmax(-1)
    gap = fold.fold_gap(m, folded, x)
    assert abs(gap["max_abs_logit_diff"] - float((a - b).abs().max())) <= 1e-12
    assert abs(gap["mean_kl"] - float((la.exp() * (la - lb)).sum(-1).mean())) <= 1e-12
    assert fold.fold_gap(frozen, folded, x)["max_abs_logit_diff"] <= 1e-12


def test_rmsnorm_keeps_float64():
    norm = RMSNorm(6, 1e-5).double()
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 6, dtype=torch.float64))
    x = torch.randn(3, 4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    want = x / (x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * norm.weight
    torch.testing.assert_close(norm(x), want, **TOL)


def test_gated_rmsnorm_keeps_float64():
    norm = GatedRMSNorm(6, 1e-5).double()
    g = torch.Generator().manual_seed(1)
    y, z = (torch.randn(2, 5, 6, dtype=torch.float64, generator=g) for _ in range(2))
    h = y * z * torch.sigmoid(z)
    torch.testing.assert_close(norm(y, z), h / (h.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt(), **TOL)
