"""Unit tests of the reusable analyses (heads, ablation, circuits, folding) on tiny models."""

import pytest
import torch

from dlmlab.analysis import ablation, circuits, fold, heads
from dlmlab.models import Transformer, TransformerConfig


def tiny(n_layers=2, norm="layernorm", mask="bidirectional", d=16, H=2, V=20, T=12, **kw):
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=V, d_model=d, n_layers=n_layers, n_heads=H, d_mlp=kw.pop("d_mlp", 0),
                            norm=norm, attn_mask=mask, max_seq_len=T, init_std=0.3, **kw)
    m = Transformer(cfg).eval()
    with torch.no_grad():  # non-trivial norm weights and biases
        for mod in m.modules():
            if isinstance(mod, torch.nn.LayerNorm) or type(mod).__name__ == "RMSNorm":
                mod.weight.uniform_(0.5, 1.5)
                if getattr(mod, "bias", None) is not None:
                    mod.bias.normal_(0, 0.2)
    return m


def toks(B=4, T=12, V=20, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# -- heads ---------------------------------------------------------------------------------
def shift_head_model(shift: int, mask: str, T=8):
    """1 layer, 2 heads, no norm: head 0 attends from i to i+shift via one-hot positions; head 1 uniform."""
    d = 2 * T
    cfg = TransformerConfig(vocab_size=5, d_model=d, n_layers=1, n_heads=2, d_head=T, norm="none", attn_mask=mask,
                            max_seq_len=T)
    m = Transformer(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.pos_emb.weight[:, :T] = torch.eye(T)
        Wk = torch.zeros(2 * T, d)
        Wq = torch.zeros(2 * T, d)
        Wk[:T, :T] = torch.eye(T)  # head 0 key = one-hot position
        for i in range(T):
            j = i + shift
            if 0 <= j < T:
                Wq[j, i] = 60.0  # query at i points to key position j
        m.blocks[0].attn.W_k.weight.copy_(Wk)
        m.blocks[0].attn.W_q.weight.copy_(Wq)
        m.blocks[0].ln1 = torch.nn.Identity()
    return m


def test_hand_built_previous_token_head_scores_one():
    m = shift_head_model(-1, "causal")
    s = heads.previous_token_scores(m, toks(3, 8, 5))
    assert s.shape == (1, 2)
    assert s[0, 0] > 0.99
    assert s[0, 1] < 0.5  # the uniform head


def test_hand_built_next_token_head_scores_one():
    m = shift_head_model(+1, "bidirectional")
    assert heads.next_token_scores(m, toks(3, 8, 5))[0, 0] > 0.99
    assert heads.previous_token_scores(m, toks(3, 8, 5))[0, 0] < 0.05  # only the last row (no next) spreads


def test_attention_to_matches_patterns_and_checks_positions():
    m = tiny()
    x = toks()
    pats = heads.attention_patterns(m, x)
    q, k = torch.tensor([1, 2, 3, 4]), torch.tensor([0, 5, 3, 11])
    s = heads.attention_to(m, x, q, k)
    assert torch.allclose(s[1, 0], torch.stack([pats[1][b, 0, q[b], k[b]] for b in range(4)]).mean())
    with pytest.raises(ValueError, match="out of range"):
        heads.attention_to(m, x, q, torch.tensor([0, 0, 0, 12]))
    with pytest.raises(ValueError, match="offset"):
        heads.offset_scores(m, x, 0)


# -- ablation ------------------------------------------------------------------------------
def test_zero_ablation_equals_zeroing_output_weights():
    m = tiny()
    x = toks()
    with ablation.ablate_heads(m, [(1, 0)], "zero"):
        ablated = m(x)
    assert not torch.allclose(ablated, m(x), atol=1e-4)  # ablating a head changes outputs
    dh = m.cfg.d_head
    with torch.no_grad():
        m.blocks[1].attn.W_o.weight[:, :dh] = 0.0
    assert torch.allclose(ablated, m(x), atol=1e-5)


def test_mean_ablation_with_constant_values_is_identity_and_effects_shape():
    m = tiny()
    x = toks(1)
    means = ablation.head_means(m, x)  # per-position mean over a batch of one = the activation itself
    with ablation.ablate_heads(m, [(0, 1), (1, 0)], "mean", means):
        same = m(x)
    assert torch.allclose(same, m(x), atol=1e-5)
    y = toks(4, seed=3)
    base, drop = ablation.ablation_effects(m, lambda mm: float(mm(y).logsumexp(-1).mean()), "mean",
                                           ablation.head_means(m, y))
    assert drop.shape == (2, 2) and torch.isfinite(drop).all() and drop.abs().sum() > 0
    with pytest.raises(ValueError, match="no head"):
        with ablation.ablate_heads(m, [(2, 0)]):
            pass
    with pytest.raises(ValueError, match="means"):
        with ablation.ablate_heads(m, [(0, 0)], "mean"):
            pass


# -- circuits ------------------------------------------------------------------------------
def test_factored_norm_svd_eig_match_dense():
    g = torch.Generator().manual_seed(0)
    f = circuits.Factored(torch.randn(3, 10, 4, generator=g, dtype=torch.float64),
                          torch.randn(3, 4, 10, generator=g, dtype=torch.float64))
    full = f.full
    assert torch.allclose(f.norm(), full.norm(dim=(-1, -2)))
    U, S, Vh = f.svd()
    assert torch.allclose(S, torch.linalg.svdvals(full)[:, :4])
    assert torch.allclose(U @ torch.diag_embed(S) @ Vh, full)
    eig = f.eigenvalues()
    assert torch.allclose(eig.sum(-1).real, torch.diagonal(full, dim1=-2, dim2=-1).sum(-1))


def test_composition_scores_shape_range_and_dense_value():
    m = tiny(n_layers=3, H=2).double()
    for kind in circuits.COMPOSITIONS:
        s = circuits.composition_scores(m, kind)
        assert s.shape == (3, 2, 3, 2)
        assert (s >= 0).all() and (s <= 1 + 1e-9).all()
        for l1 in range(3):
            for l2 in range(l1 + 1):
                assert (s[l1, :, l2] == 0).all()
        assert (s[0, :, 1] > 0).all()
    ov0 = circuits.ov_circuit(m, 0).full[1]
    qk2 = circuits.qk_circuit(m, 2).full[0]
    dense = {"Q": ov0 @ qk2, "K": ov0 @ qk2.T}
    for kind, prod in dense.items():
        want = prod.norm() / (ov0.norm() * qk2.norm())
        assert torch.allclose(circuits.composition_scores(m, kind)[0, 1, 2, 0], want)
    ov2 = circuits.ov_circuit(m, 2).full[0]
    want = (ov0 @ ov2).norm() / (ov0.norm() * ov2.norm())
    assert torch.allclose(circuits.composition_scores(m, "V")[0, 1, 2, 0], want)
    with pytest.raises(ValueError):
        circuits.composition_scores(m, "X")


def test_qk_circuit_gives_attention_scores():
    m = tiny(norm="none", bias=False).double()
    x = toks(1)
    with m.cache(["blocks.0.resid_pre", "blocks.0.attn.q", "blocks.0.attn.k"]) as c:
        m(x)
    r = c["blocks.0.resid_pre"][0]
    qk = circuits.qk_circuit(m, 0).full  # [H, D, D]
    q, k = c["blocks.0.attn.q"][0], c["blocks.0.attn.k"][0]  # [T, H, dh]
    for h in range(2):
        assert torch.allclose(r @ qk[h] @ r.T, q[:, h] @ k[:, h].T)
    cs = circuits.copying_scores(m)
    assert cs.shape == (2, 2) and (cs.abs() <= 1 + 1e-9).all()


# -- folding -------------------------------------------------------------------------------
@pytest.mark.parametrize("norm,d_mlp,mlp", [("layernorm", 0, "gelu_new"), ("rmsnorm", 0, "gelu_new"),
                                            ("layernorm", 32, "swiglu"), ("rmsnorm", 32, "gelu")])
def test_fold_equals_frozen_scale_model(norm, d_mlp, mlp):
    m = tiny(norm=norm, d_mlp=d_mlp, mlp=mlp).double()
    x = toks()
    scales = fold.norm_scales(m, x)
    n_norms = 2 * 2 + 1 if d_mlp else 2 + 1
    assert len(scales) == n_norms and all(s > 0 for s in scales.values())
    folded = fold.fold_ln_frozen_scale(m, scales)
    frozen = fold.freeze_norm_scales(m, scales)
    assert not any(isinstance(mod, (torch.nn.LayerNorm,)) for mod in folded.modules())
    assert folded.cfg.norm == "none"
    assert torch.allclose(folded(x), frozen(x), atol=1e-9)  # the fold itself is exact
    gap = fold.fold_gap(m, folded, x)
    assert gap["max_abs_logit_diff"] > 0 and 0 <= gap["argmax_agreement"] <= 1
    # the original is untouched and still tied
    assert m.unembed.weight is m.tok_emb.weight


def test_fold_exact_when_scale_is_constant():
    """If every norm input has the frozen scale, the folded model reproduces the original exactly."""
    m = tiny(n_layers=0, norm="layernorm").double()  # only ln_final: its input is the embedding
    x = toks(1, 12)
    with torch.no_grad():  # give every embedding row (minus its mean) the same std
        e = m.tok_emb.weight + m.pos_emb.weight[:1] * 0
        m.pos_emb.weight.zero_()
        e = e - e.mean(-1, keepdim=True)
        m.tok_emb.weight.copy_(e / e.std(-1, unbiased=False, keepdim=True) * 0.7)
    folded = fold.fold_ln_frozen_scale(m, fold.norm_scales(m, x))
    assert torch.allclose(folded(x), m(x), atol=1e-6)


def test_fold_rejects_missing_scale():
    m = tiny()
    with pytest.raises(KeyError, match="no frozen scale"):
        fold.fold_ln_frozen_scale(m, {})
