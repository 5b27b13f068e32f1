"""Relation tasks: synthetic facts / queries and the real reversal-curse data."""

import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.data import DataNotFound
from dlmlab.tasks.relations import (PERSON_SPLITS, RelationTaskConfig, SyntheticRelations, TextFacts,
                                    celebrity_facts, encode_facts, load_celebrity_pairs, load_person_description,
                                    train_relation_tokenizer)


def test_synthetic_ids_and_queries():
    t = SyntheticRelations(RelationTaskConfig(n_pairs=10, gap=2), seed=3)
    N = 10
    assert t.vocab_size == 2 * N + 2 + 1 and t.mask_id == t.vocab_size - 1 and t.seq_len == 4
    assert sorted(t.b_ids.tolist()) == list(range(N, 2 * N))  # a bijection onto the B entities
    docs = t.facts()
    assert docs.shape == (N, 4)
    assert torch.equal(docs[:, 0], t.a_ids) and torch.equal(docs[:, -1], t.b_ids)
    assert torch.equal(docs[:, 1:3], t.filler.expand(N, -1))
    f, r = t.mdm_forward(), t.mdm_reverse()
    assert torch.all(f.tokens[:, 0] == t.mask_id) and torch.equal(f.tokens[:, 1:], docs[:, 1:])
    assert torch.equal(r.tokens[:, 0], t.b_ids) and torch.all(r.tokens[:, -1] == t.mask_id)
    assert torch.equal(f.target, t.a_ids) and torch.equal(r.target, t.a_ids)
    assert torch.equal(f.source, t.b_ids) and torch.equal(r.source, t.b_ids)
    assert torch.all(r.query_pos == 3) and torch.all(r.evidence_pos == 0)
    af, ar = t.arm_forward(), t.arm_reverse()
    assert af.tokens.shape == (N, 3) and torch.equal(af.target, t.b_ids) and torch.equal(af.source, t.a_ids)
    assert torch.equal(ar.tokens[:, 0], t.b_ids) and torch.equal(ar.target, t.a_ids) and torch.all(ar.query_pos == 2)
    d5 = t.mdm_reverse(distance=5)
    assert d5.tokens.shape == (N, 6) and torch.all(d5.query_pos == 5)
    # different seeds -> different facts; same seed -> same facts
    assert not torch.equal(SyntheticRelations(t.cfg, 4).b_ids, t.b_ids)
    assert torch.equal(SyntheticRelations(t.cfg, 3).b_ids, t.b_ids)
    g = torch.Generator().manual_seed(0)
    assert t.sample(7, g).shape == (7,)


def test_bad_config():
    with pytest.raises(ConfigError, match="n_pairs"):
        SyntheticRelations(RelationTaskConfig(n_pairs=1))
    with pytest.raises(ConfigError, match="gap"):
        SyntheticRelations(RelationTaskConfig(gap=-1))


def test_person_description_files():
    train = load_person_description("p2d_prompts_train")
    rev = load_person_description("p2d_reverse_prompts_test")
    assert len(train) == 900 and len(rev) == 300
    assert len(set(rev.completions)) == 30  # 30 names, 10 templates each
    assert all(c.strip() in " ".join(train.texts()) for c in set(rev.completions))
    with pytest.raises(ValueError, match="unknown person-description split"):
        load_person_description("nope")
    assert "validation_prompts" in PERSON_SPLITS


def test_missing_data_is_a_clear_error(tmp_path):
    with pytest.raises(DataNotFound, match="reversal-curse data not found"):
        load_person_description("p2d_prompts_train", root=tmp_path)
    (tmp_path / "reversal_curse" / "person_description").mkdir(parents=True)
    (tmp_path / "reversal_curse" / "person_description" / "p2d_prompts_train.jsonl").write_text('{"prompt": 1}\n')
    with pytest.raises(ValueError, match="p2d_prompts_train.jsonl:1"):
        load_person_description("p2d_prompts_train", root=tmp_path)


def test_celebrity_pairs_and_encoding():
    pairs = load_celebrity_pairs()
    assert len(pairs) > 1000 and {p.parent_type for p in pairs} <= {"mother", "father"}
    fwd, rev = celebrity_facts(pairs[:5])
    assert fwd.prompts[0].startswith(pairs[0].child) and rev.completions[0] == " " + pairs[0].child
    tok = train_relation_tokenizer(fwd.texts() + rev.texts(), vocab_size=300)
    toks, comp = encode_facts(tok, fwd, seq_len=40, pad_id=tok.vocab_size)
    assert toks.shape == (5, 40) and comp.shape == (5, 40)
    assert tok.decode(toks[0][comp[0]].tolist()) == fwd.completions[0]
    with pytest.raises(ValueError, match="exceeds seq_len"):
        encode_facts(tok, TextFacts(["x" * 50], [" y"]), seq_len=8, pad_id=0)
