"""The study's fixed-layout pair task ("[M] r B" / "B r [M]" at fixed positions) and its preset checks."""

from __future__ import annotations

import pytest
import torch

from dlmlab.studies.reversal.gradient_alignment import storage_gradient_cosine
from dlmlab.studies.reversal.queries import query_eval
from dlmlab.studies.reversal.storage_routing import storage_routing
from dlmlab.config import ConfigError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.studies.reversal.presets import ReversalPreset, fixed_pair_task
from dlmlab.tasks.positional_relations import PositionalRelations, PositionalTaskConfig


def _model(task, positions):
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=task.vocab_size, d_model=16, n_layers=1, n_heads=2,
                                         positions=positions, attn_mask="bidirectional", max_seq_len=task.seq_len,
                                         init_std=0.3)).eval()


def test_every_fact_sits_at_the_same_positions():
    t = PositionalRelations(fixed_pair_task(8), seed=1)
    for lay in (t.eval_layout(), t.sample_layout(64, torch.Generator().manual_seed(0))):
        assert torch.all(lay.p == 0) and torch.all(lay.d == 2) and lay.dis_pos.shape[1] == 0
    lay = t.eval_layout()
    f, r = t.mdm_forward(lay), t.mdm_reverse(lay)
    assert f.tokens.shape == (8, 3)
    assert torch.all(f.tokens[:, 0] == t.mask_id) and torch.all(f.tokens[:, 1] == t.rel_id)
    assert torch.equal(f.tokens[:, 2], t.b_ids) and torch.equal(r.tokens[:, 0], t.b_ids)
    assert torch.all(r.tokens[:, 2] == t.mask_id) and torch.all(r.query_pos == 2) and torch.all(r.evidence_pos == 0)
    assert torch.equal(f.target, t.a_ids) and torch.equal(r.target, t.a_ids)


def test_alibi_mirrors_the_fixed_layout_exactly_rope_and_learned_do_not():
    t = PositionalRelations(fixed_pair_task(8))
    lay = t.eval_layout()
    f, r = t.mdm_forward(lay), t.mdm_reverse(lay)
    ex = (t.mask_id,)
    m = _model(t, "alibi")
    assert query_eval(m, f, ex)["p_correct"] == pytest.approx(query_eval(m, r, ex)["p_correct"], rel=1e-5)
    for pe in ("rope", "learned"):
        m = _model(t, pe)
        assert query_eval(m, f, ex)["p_correct"] != pytest.approx(query_eval(m, r, ex)["p_correct"], rel=1e-4)


def test_storage_gradient_cosine_reuses_given_splits():
    t = PositionalRelations(PositionalTaskConfig(n_pairs=6, seq_len=12, distances=[1, 2], n_distractors=2))
    lay = t.eval_layout()
    f, r = t.mdm_forward(lay), t.mdm_reverse(lay)
    m = _model(t, "rope")
    ex = (t.mask_id,)
    splits = (storage_routing(m, f, exclude=ex), storage_routing(m, r, exclude=ex))
    torch.testing.assert_close(storage_gradient_cosine(m, f, r, exclude=ex, splits=splits),
                               storage_gradient_cosine(m, f, r, exclude=ex))


def test_a_pair_task_must_be_a_fixed_layout():
    fixed_pair_task(4).validate()
    assert fixed_pair_task(4, gap=2).seq_len == 4
    with pytest.raises(ConfigError, match="seq_len"):  # distractors still need their margin
        PositionalTaskConfig(n_pairs=4, seq_len=3, distances=[2], n_distractors=1).validate()
    with pytest.raises(ConfigError, match="fixed layout"):
        ReversalPreset(pair_task=PositionalTaskConfig(n_pairs=4, seq_len=8, distances=[2], n_distractors=0))
    with pytest.raises(ConfigError, match="MDM kind"):
        ReversalPreset(kinds=["arm"], pair_task=fixed_pair_task(4))
