"""The recorded denoising trajectory: committed tokens, per-position confidence / entropy, hook activations by step."""

import pytest
import torch

from dlmlab.models import Transformer, TransformerConfig
from dlmlab.prediff import PreDiffLM
from dlmlab.sampling import DecodeConfig, TraceConfig, generate


def model():
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=64)
    return PreDiffLM(Transformer(cfg)).eval()


@pytest.mark.parametrize("cache,block_len", [("prompt", 0), ("prefix", 4)])
def test_trajectory_records_every_step(cache, block_len):
    m = model()
    prompt = torch.randint(0, 29, (2, 5), generator=torch.Generator().manual_seed(0))
    seen = []
    trace = TraceConfig(hooks=["blocks.1.resid_post", "blocks.0.attn.pattern"], steps=[0, 2])
    res = generate(m, prompt, 8, DecodeConfig(steps=4, kv_reuse=cache, block_len=block_len),
                   torch.Generator().manual_seed(1), trace=trace, callback=seen.append, record=True)
    traj = res.trajectory
    assert seen == traj and [r.step for r in traj] == list(range(res.steps))
    # every generated position is committed exactly once, the prompt never
    committed = torch.stack([r.committed for r in traj]).sum(0)
    assert torch.equal(committed[:, 5:], torch.ones(2, 8, dtype=committed.dtype)) and committed[:, :5].sum() == 0
    for prev, rec in zip([None] + traj[:-1], traj):
        before = prompt.new_full((2, 13), m.mask_id) if prev is None else prev.tokens
        cand = before == m.mask_id
        s, e = rec.block_span
        inside = torch.zeros_like(cand)
        inside[:, s:e] = True
        assert torch.isfinite(rec.confidence[cand & inside]).all() and torch.isnan(rec.confidence[~(cand & inside)]).all()
        assert ((rec.confidence[cand & inside] > 0) & (rec.confidence[cand & inside] <= 1)).all()
        assert (rec.entropy[cand & inside] >= 0).all()
        assert torch.equal(rec.tokens[rec.committed], rec.tokens[rec.committed])  # committed tokens are real ids
        assert (rec.tokens[rec.committed] != m.mask_id).all()
    assert torch.equal(traj[-1].tokens, res.tokens)
    # activations only at the chosen steps, each tagged with its step, shaped by the forward's window
    steps = {a.step for r in traj for a in r.activations}
    assert steps == {0, 2}
    for r in traj:
        for a in r.activations:
            assert a.step == r.step
            if a.name == "blocks.1.resid_post":
                assert a.value.shape[0] == len(a.rows) and a.value.shape[-1] == 32
            else:
                assert a.value.dim() == 4  # [B, H, Tq, Tk]


def test_activations_match_a_separate_forward():
    m = model()
    prompt = torch.randint(0, 29, (1, 5), generator=torch.Generator().manual_seed(0))
    res = generate(m, prompt, 6, DecodeConfig(steps=3, kv_reuse="none", self_cond=False),
                   torch.Generator().manual_seed(1), trace=TraceConfig(hooks=["blocks.0.resid_post"], steps=[1]),
                   record=True)
    act = res.trajectory[1].activations[0]
    before = res.trajectory[0].tokens
    t = (before[:, 5:] == m.mask_id).float().mean(1)
    with m.backbone.cache(["blocks.0.resid_post"]) as c:
        m(before, t, prompt_len=5)
    torch.testing.assert_close(act.value, c["blocks.0.resid_post"])
