"""Reversal diagnostics: attention scores, storage-routing decomposition, correlation, gradient alignment."""

import pytest
import torch

from dlmlab.studies.reversal.attention_correlation import pearson, score_correlation
from dlmlab.studies.reversal.gradient_alignment import (parameter_gradient_cosine, storage_column_gradient,
                                                        storage_gradient_cosine)
from dlmlab.studies.reversal.queries import query_eval, query_loss
from dlmlab.studies.reversal.storage_routing import attention_scores, storage_matrix, storage_routing
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.tasks.relations import Queries, RelationTaskConfig, SyntheticRelations

TASK = SyntheticRelations(RelationTaskConfig(n_pairs=12, gap=1), seed=0)


def model(positions="rope", mask="bidirectional", norm="layernorm", layers=1, d_mlp=0, seed=0, init_std=0.3):
    torch.manual_seed(seed)
    cfg = TransformerConfig(vocab_size=TASK.vocab_size, d_model=16, n_layers=layers, n_heads=2, d_mlp=d_mlp,
                            norm=norm, positions=positions, attn_mask=mask, max_seq_len=12, tie_embeddings=False,
                            init_std=init_std)
    return Transformer(cfg).eval()


@pytest.mark.parametrize("positions", ["learned", "rope", "alibi"])
@pytest.mark.parametrize("mask", ["causal", "bidirectional"])
def test_attention_scores_softmax_is_the_pattern(positions, mask):
    m = model(positions, mask, layers=2, d_mlp=32)
    toks = torch.randint(0, TASK.vocab_size, (3, 7))
    for layer in (0, 1):
        with m.cache([f"blocks.{layer}.attn.pattern"]) as c:
            m(toks)
        s = attention_scores(m, toks, layer)
        assert s.shape == (3, 2, 7, 7)
        torch.testing.assert_close(s.softmax(-1), c[f"blocks.{layer}.attn.pattern"], atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="layer 5"):
        attention_scores(m, toks, 5)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "none"])
def test_storage_routing_rest_is_the_direct_path(norm):
    """For a 1-layer attention-only model, logit - routed must equal the direct path + biases,
    computed independently from the residual at the query."""
    m = model("rope", norm=norm)
    q = TASK.mdm_reverse()
    sr = storage_routing(m, q)
    with m.cache(["blocks.0.resid_pre", "blocks.0.resid_post"]) as c:
        logits = m(q.tokens)
    rows = torch.arange(len(q))
    torch.testing.assert_close(sr.logit, logits[rows, q.query_pos, q.target])
    x_i = c["blocks.0.resid_pre"][rows, q.query_pos] + m.blocks[0].attn.W_o.bias  # direct + b_O
    resid = c["blocks.0.resid_post"][rows, q.query_pos]
    ln = m.ln_final
    if norm == "layernorm":
        s = (resid.var(-1, unbiased=False) + ln.eps).sqrt()[:, None]
        direct = ln.weight * (x_i - x_i.mean(-1, keepdim=True)) / s + ln.bias
    elif norm == "rmsnorm":
        direct = ln.weight * x_i / (resid.pow(2).mean(-1, keepdim=True) + ln.eps).sqrt()
    else:
        direct = x_i
    expected_rest = (direct * m.unembed.weight[q.target]).sum(-1)
    torch.testing.assert_close(sr.rest, expected_rest, atol=1e-4, rtol=1e-4)
    assert sr.alpha.shape == sr.storage.shape == (len(q), 2, 3)
    torch.testing.assert_close(sr.alpha.sum(-1), torch.ones(len(q), 2))


@pytest.mark.parametrize("positions", ["rope", "alibi"])
def test_storage_is_position_invariant_with_relative_positions(positions):
    """With RoPE/ALiBi the value side has no position: the evidence B carries is Y[A, B] / scale in
    the forward and the reverse query alike."""
    m = model(positions)
    Y = storage_matrix(m, torch.arange(TASK.vocab_size))  # [H, V, V]
    for q in (TASK.mdm_forward(), TASK.mdm_reverse()):
        sr = storage_routing(m, q)
        expect = Y[:, q.target, q.source].T / sr.scale[:, None]  # [N, H]
        torch.testing.assert_close(sr.evidence_storage, expect, atol=1e-4, rtol=1e-4)


def test_storage_differs_by_position_with_learned_positions():
    m = model("learned")
    f, r = storage_routing(m, TASK.mdm_forward()), storage_routing(m, TASK.mdm_reverse())
    assert not torch.allclose(f.evidence_storage * f.scale[:, None], r.evidence_storage * r.scale[:, None], atol=1e-3)


def test_contrast_decomposes_the_margin():
    m = model("rope")
    q = TASK.mdm_forward()
    sr = storage_routing(m, q, contrast=TASK.a_ids)
    logits = m(q.tokens)[torch.arange(len(q)), 0]
    margin = logits.gather(1, q.target[:, None]).squeeze(1) - logits[:, TASK.a_ids].mean(1)
    torch.testing.assert_close(sr.logit, margin)
    torch.testing.assert_close(sr.routed.sum((1, 2)) + sr.rest, margin)


def test_alibi_forward_and_reverse_scores_coincide_rope_does_not():
    fwd, rev = TASK.mdm_forward(), TASK.mdm_reverse()
    c = score_correlation(model("alibi"), fwd, rev)
    torch.testing.assert_close(c.forward, c.reverse)
    assert c.pooled == pytest.approx(1.0, abs=1e-6)
    c = score_correlation(model("rope"), fwd, rev)
    assert c.per_head.shape == (2,)
    assert not torch.allclose(c.forward, c.reverse, atol=1e-4)
    with pytest.raises(ValueError, match="pair up"):
        score_correlation(model("rope"), fwd, rev.subset(torch.arange(3)))


def test_pearson():
    x = torch.randn(50)
    assert float(pearson(x, 2 * x + 1)) == pytest.approx(1.0)
    assert float(pearson(x, -x)) == pytest.approx(-1.0)
    assert torch.isnan(pearson(x, torch.ones(50)))


def test_storage_column_gradient_matches_autograd():
    """dNLL/d(eps) for a perturbation eps*e of head h's value at the B positions equals <g_h, W_U W_O^h e>."""
    m = model("rope", norm="none")
    q = TASK.mdm_reverse()
    b = q.source
    g = storage_column_gradient(m, q, b)  # [N, H, V]
    h, dh = 1, m.cfg.d_head
    e = torch.randn(dh)
    eps = torch.zeros((), requires_grad=True)
    reads = (q.tokens == b[:, None]).float()[:, :, None]  # [N,T,1]

    def bump(v, hp):
        v = v.clone()
        v[:, :, h] = v[:, :, h] + eps * e * reads
        return v

    with m.hooks({"blocks.0.attn.v": bump}):
        per_fact = []
        lp = m(q.tokens)[torch.arange(len(q)), q.query_pos].log_softmax(-1)
        nll = -lp.gather(1, q.target[:, None]).squeeze(1)
        for n in range(len(q)):
            (d,) = torch.autograd.grad(nll[n], eps, retain_graph=True)
            per_fact.append(d)
    W_O = m.blocks[0].attn.head_weights()["W_O"][h]  # [dh, D]
    dY = m.unembed.weight @ (e @ W_O)  # [V]
    expect = g[:, h] @ dY
    torch.testing.assert_close(torch.stack(per_fact), expect.detach(), atol=1e-4, rtol=1e-3)


def test_gradient_cosine_structure():
    m = model("alibi")
    cos = storage_gradient_cosine(m, TASK.mdm_forward(), TASK.mdm_reverse())
    assert cos.shape == (TASK.cfg.n_pairs,)
    torch.testing.assert_close(cos, torch.ones_like(cos), atol=1e-5, rtol=0)  # ALiBi: identical queries
    # an AR forward query "A is" never reads B: cosine 0
    arm = model("rope", mask="causal")
    cos = storage_gradient_cosine(arm, TASK.arm_forward(), TASK.arm_reverse())
    assert torch.all(cos == 0)
    q = TASK.mdm_forward()
    assert parameter_gradient_cosine(m, q, q) == pytest.approx(1.0, abs=1e-5)
    c = parameter_gradient_cosine(model("learned"), q, TASK.mdm_reverse())
    assert -1.0 <= c <= 1.0


def test_query_eval_and_loss():
    class Fixed(torch.nn.Module):
        def forward(self, tokens):
            out = torch.zeros(tokens.shape[0], tokens.shape[1], 5)
            out[:, :, 2] = 3.0
            out[:, :, 4] = 10.0  # excluded below
            return out

    q = Queries(torch.zeros(2, 3, dtype=torch.long), torch.tensor([0, 2]), torch.tensor([2, 1]), torch.tensor([1, 1]))
    r = query_eval(Fixed(), q, exclude=(4,))
    assert r["acc"] == 0.5 and r["rank"] == 0.5
    p2 = torch.tensor([0, 0, 3.0, 0]).softmax(0)
    assert r["p_correct"] == pytest.approx(float((p2[2] + p2[1]) / 2), rel=1e-5)
    assert float(query_loss(Fixed(), q, exclude=(4,))) == pytest.approx(r["nll"], rel=1e-5)
