"""The positional reversal task, the autograd storage-gradient cosine, the positional part of the attention
correlation, the intervals and each claim's decision on small hand-built cases."""

import numpy as np
import pytest
import torch

from dlmlab.studies.reversal import attention_correlation as ac
from dlmlab.studies.reversal.gradient_alignment import per_query_gradient_cosine, per_query_gradients, storage_modules
from dlmlab.studies.reversal.queries import query_loss
from dlmlab.config import ConfigError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.report.intervals import mean_ci, paired_diff_ci
from dlmlab.studies.reversal import claims as C
from reversal_summary import KINDS, PES, pair_summary, reversal_summary
from dlmlab.tasks.positional_relations import PositionalRelations, PositionalTaskConfig

CFG = PositionalTaskConfig(n_pairs=10, seq_len=16, distances=[1, 2, 3], n_distractors=3)


def model(task, positions="rope", mask="bidirectional", seed=0):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(vocab_size=task.vocab_size, d_model=16, n_layers=1, n_heads=2,
                                         positions=positions, attn_mask=mask, max_seq_len=task.seq_len,
                                         init_std=0.3)).eval()


# ------------------------------------------------------------------------------------------ task
def test_layout_places_fact_relations_and_distractors():
    t = PositionalRelations(CFG, seed=1)
    N = CFG.n_pairs
    assert (t.rel_id, t.pad_id, t.mask_id, t.vocab_size) == (2 * N, 2 * N + 1, 2 * N + 2, 2 * N + 3)
    lay = t.sample_layout(200, torch.Generator().manual_seed(0))
    docs = t.documents(lay)
    rows = torch.arange(200)
    assert torch.equal(docs[rows, lay.p], t.a_ids[lay.fact]) and torch.equal(docs[rows, lay.p + lay.d], t.b_ids[lay.fact])
    assert set(lay.d.tolist()) == {1, 2, 3} and int(lay.p.min()) == 0 and int((lay.p + lay.d).max()) == CFG.seq_len - 1
    for n in range(200):
        p, d = int(lay.p[n]), int(lay.d[n])
        assert all(docs[n, p + 1:p + d] == t.rel_id)
        for pos in lay.dis_pos[n].tolist():  # farther than d from A and from B
            assert pos < p - d or pos > p + 2 * d
        ids = lay.dis_ids[n].tolist()
        assert len(set(ids)) == 3 and int(t.a_ids[lay.fact[n]]) not in ids and int(t.b_ids[lay.fact[n]]) not in ids
        assert all(0 <= i < 2 * N for i in ids)
        ent = (docs[n] < 2 * N).sum()
        assert ent == 5  # A, B, 3 distractors; the rest relation / pad


def test_queries_share_the_layout():
    t = PositionalRelations(CFG, seed=0)
    lay = t.eval_layout(per_fact=2)
    assert len(lay) == 20 and lay.d.tolist()[:3] == [1, 2, 3]
    f, r = t.mdm_forward(lay), t.mdm_reverse(lay)
    rows = torch.arange(20)
    assert torch.all(f.tokens[rows, f.query_pos] == t.mask_id) and torch.all(r.tokens[rows, r.query_pos] == t.mask_id)
    assert torch.equal(f.source, t.b_ids[lay.fact]) and torch.equal(r.source, t.b_ids[lay.fact])
    assert torch.equal(f.target, r.target) and torch.equal(f.query_pos, r.evidence_pos)
    same = torch.ones_like(f.tokens, dtype=torch.bool)
    same[rows, lay.p], same[rows, lay.p + lay.d] = False, False
    assert torch.equal(f.tokens[same], r.tokens[same])  # the rest is identical
    af, ar = t.arm_forward(lay), t.arm_reverse(lay)
    assert torch.equal(af.query_pos, lay.p + lay.d - 1) and torch.equal(af.target, t.b_ids[lay.fact])
    assert torch.all(af.tokens[rows, lay.p + lay.d] == t.pad_id) and torch.equal(ar.target, t.a_ids[lay.fact])
    assert torch.equal(t.eval_layout(2).p, lay.p)  # deterministic


def test_other_distractors_and_probes():
    cfg = PositionalTaskConfig(n_pairs=10, seq_len=16, distances=[2], n_distractors=4, distractors="other")
    t = PositionalRelations(cfg)
    lay = t.sample_layout(50, torch.Generator().manual_seed(0))
    assert t.vocab_size == 3 * 10 + 3 and bool(((lay.dis_ids >= 20) & (lay.dis_ids < 30)).all())
    pf, pr = t.probes(7, reverse=False), t.probes(7, reverse=True)
    assert torch.all(pr.query_pos - pr.evidence_pos == 7) and torch.all(pf.evidence_pos - pf.query_pos == 7)
    assert torch.equal(pf.evidence_pos, pr.query_pos)


@pytest.mark.parametrize("bad", [dict(seq_len=9), dict(distances=[]), dict(distances=[0]), dict(n_distractors=11),
                                 dict(distractors="words")])
def test_task_validation(bad):
    with pytest.raises(ConfigError):
        PositionalTaskConfig(**{**CFG.__dict__, **bad}).validate()


# ------------------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("positions", ["learned", "rope", "alibi"])
def test_per_query_gradients_match_single_query_autograd(positions):
    t = PositionalRelations(CFG)
    m = model(t, positions)
    q = t.mdm_forward(t.eval_layout())
    mods = storage_modules(m)
    g = per_query_gradients(m, q, mods, exclude=(t.mask_id,))
    params = [p for mod in mods.values() for p in (mod.weight, mod.bias)]
    assert g.shape == (len(q), sum(p.numel() for p in params))
    for i in (0, 5):
        ref = torch.autograd.grad(query_loss(m, q.subset(torch.tensor([i])), (t.mask_id,)), params)
        torch.testing.assert_close(g[i], torch.cat([x.flatten() for x in ref]), atol=1e-5, rtol=1e-4)


def test_gradient_cosine_one_for_the_same_query_lower_for_another_target():
    t = PositionalRelations(CFG)
    m = model(t, "alibi")
    lay = t.eval_layout()
    f = t.mdm_forward(lay)
    torch.testing.assert_close(per_query_gradient_cosine(m, f, f), torch.ones(len(f)))
    other = t.mdm_forward(lay)
    other.target = other.target.roll(1)  # same input, another answer
    assert float(per_query_gradient_cosine(m, f, other).max()) < 0.999
    with pytest.raises(ValueError, match="pair up"):
        per_query_gradient_cosine(m, f, f.subset(torch.arange(3)))


# ------------------------------------------------------------------------------------------ attention
def test_alibi_positional_part_is_mirrored_exactly():
    t = PositionalRelations(CFG)
    m = model(t, "alibi")
    pairs = {d: (t.probes(d, False), t.probes(d, True)) for d in range(1, 8)}
    prof = ac.distance_profile(m, pairs)
    torch.testing.assert_close(prof.forward, prof.reverse)
    assert prof.correlation == pytest.approx(1.0)
    assert prof.forward.shape == (7, 2) and prof.distances == list(range(1, 8))


def test_distance_profile_on_hand_built_scores(monkeypatch):
    # forward score grows with the distance, reverse falls: correlation -1 for every head
    def fake(model, q, layer=0):
        d = (q.evidence_pos - q.query_pos).double()  # + for forward, - for reverse
        return torch.stack([d, 2 * d], 1)

    monkeypatch.setattr(ac, "evidence_scores", fake)
    t = PositionalRelations(CFG)
    prof = ac.distance_profile(None, {d: (t.probes(d, False), t.probes(d, True)) for d in (1, 2, 3, 4)})
    torch.testing.assert_close(prof.per_head, torch.full((2,), -1.0, dtype=torch.float64))
    with pytest.raises(ValueError, match=">= 3 distances"):
        ac.distance_profile(None, {1: (t.probes(1, False), t.probes(1, True))})


# ------------------------------------------------------------------------------------------ intervals
def test_seed_intervals():
    c = mean_ci([0.5, 0.5, 0.5])
    assert (c.mean, c.lo, c.hi, c.n) == (0.5, 0.5, 0.5, 3)
    d = paired_diff_ci([0.9, 0.8, 0.7], [0.5, 0.45, 0.36])
    assert d.lo > 0 and d.excludes_zero() and d.mean == pytest.approx(1.09 / 3)
    # the same sign in all three seeds but a wide spread: a t-interval over 3 seeds still spans 0
    assert not paired_diff_ci([0.9, 0.8, 0.7], [0.5, 0.6, 0.65]).excludes_zero()
    mixed = paired_diff_ci([0.9, 0.5, 0.7], [0.5, 0.6, 0.65])
    assert mixed.lo < 0 < mixed.hi and not mixed.excludes_zero()
    assert mean_ci([1.0, 2.0, 4.0]) == mean_ci([1.0, 2.0, 4.0])  # deterministic
    assert np.isnan(mean_ci([float("nan")]).mean)
    with pytest.raises(ValueError, match="equal shapes"):
        paired_diff_ci([1.0], [1.0, 2.0])


# ------------------------------------------------------------------------------------------ claims


def test_claims_hold_on_the_study_pattern():
    cl = {c.id: c for c in C.make_claims(reversal_summary(), PES, KINDS, chance=0.1, pair_summary=pair_summary(),
                                         pair_chance=0.1)}
    assert all(c.holds is True for c in cl.values()), {k: c.holds for k, c in cl.items()}
    assert cl["pe_ordering"].evidence["reverse_p_alibi_minus_rope_lo"] > 0


def test_pe_ordering_needs_every_seed_to_agree():
    tie = reversal_summary(rev_p={"alibi": [0.9, 0.5, 0.85], "rope": [0.6, 0.55, 0.55], "learned": [0.3, 0.2, 0.25]})
    assert C.pe_ordering(tie, PES).holds is False  # alibi < rope in seed 1
    swapped = reversal_summary(rev_p={"alibi": [0.9, 0.8, 0.85], "rope": [0.2, 0.1, 0.15], "learned": [0.3, 0.2, 0.25]})
    assert C.pe_ordering(swapped, PES).holds is False
    assert C.pe_ordering(reversal_summary(), ["rope"]).holds is None


def test_claims_fail_against_their_controls():
    s = reversal_summary(arm_rev_acc=0.5)  # ARM answers the reverse query above chance
    assert C.arm_fails_reverse(s, PES, chance=0.1).holds is False
    s = reversal_summary(grad={"alibi": [0.45, 0.6, 0.7], "rope": [0.8] * 3, "learned": [0.1] * 3})
    assert C.gradient_alignment_positive(s, PES, KINDS).holds is False  # alibi's interval reaches below 0.5
    s = reversal_summary(arm_grad=0.9)  # the study states a level, not "above the ARM": the ARM does not matter
    assert C.gradient_alignment_positive(s, PES, KINDS).holds is True
    s = reversal_summary(pos_corr={"alibi": [1.0] * 3, "rope": [0.3, -0.2, 0.1], "learned": [0.9] * 3})
    assert C.attention_correlation_positive(s, PES).holds is False
    s = reversal_summary()
    s["arm/rope"]["values"]["rev_p"] = [0.7] * 3  # an ARM that transfers as well
    assert C.mdm_transfers_reverse(s, PES, KINDS).holds is False


# ------------------------------------------------------------------------------------------ study wiring
@pytest.mark.study  # a study run: outside `make test-fast`
def test_tiny_study_with_multilayer_part(tmp_path, monkeypatch):
    import json

    from dlmlab.studies.reversal.presets import ReversalPreset, fixed_pair_task
    from dlmlab.studies.reversal.run import run_preset
    from dlmlab.training import TrainConfig

    monkeypatch.setenv("DLMLAB_WORKERS", "1")
    cfg = ReversalPreset(task=PositionalTaskConfig(n_pairs=6, seq_len=12, distances=[1, 2], n_distractors=2),
                         model=TransformerConfig(d_model=16, n_layers=1, n_heads=2),
                         train=TrainConfig(steps=4, batch_size=8, log_every=2, schedule="constant"),
                         positions=["learned", "rope", "alibi"], seeds=[0, 1], max_distance=5, device="cpu",
                         multilayer=TransformerConfig(d_model=16, n_layers=2, n_heads=2, d_mlp=32),
                         pair_task=fixed_pair_task(6))
    cfg.validate()
    res = run_preset(cfg, "tiny", tmp_path, progress=False)
    data = json.loads((tmp_path / "results.json").read_text())
    titles = [t["title"] for t in data["tables"]]
    assert [t.split(":")[0] for t in titles[:4]] == ["Table 1", "Table 2", "Table 2b", "Table 3"]
    assert "fixed-layout pair task" in titles[2]
    assert "multi-layer part (2 layers)" in titles[4]
    assert len(data["results"]["multilayer"]["runs"]) == 2 * 3 * 2
    assert {c.id for c in res.claims} == {"arm_fails_reverse", "mdm_transfers_reverse", "pe_ordering",
                                          "pe_ordering_fixed_layout", "attention_correlation_positive",
                                          "gradient_alignment_positive"}
    s = data["results"]["summary"]["mdm/rope"]
    assert s["seeds"] == [0, 1] and set(s["ci"]["rev_p"]) == {"mean", "lo", "hi", "n", "method", "level", "unit"}
    assert "storage_grad_cos_mean" in s["values"] and "grad_cos_mean" in s["values"]
    assert len(data["results"]["runs"]) == 12
    pair = data["results"]["pair"]
    assert len(pair["runs"]) == 3 * 2 and {r["kind"] for r in pair["runs"]} == {"mdm"}  # MDM only, 3 PEs x 2 seeds
    assert all(r["part"] == "pair" and r["history"][0]["fwd_acc"] >= 0 for r in pair["runs"])
    assert set(pair["summary"]) == {"mdm/learned", "mdm/rope", "mdm/alibi"}
    assert "positional_corr" not in pair["summary"]["mdm/rope"]["values"]  # no probes on a 3-token task
    assert all(r["cpu_seconds"] > 0 for r in data["results"]["runs"])
    with pytest.raises(ConfigError, match="one-layer"):
        ReversalPreset(model=TransformerConfig(n_layers=2)).validate()
