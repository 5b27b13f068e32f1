"""The induction study's claim computations on small hand-built cases, and their building blocks
(no-source gains, far-position control, head-set ablation control, difference-of-means shift, corpus, curriculum)."""

import dataclasses
import json

import pytest
import torch

from dlmlab.analysis import head_sets, induction, timestep
from dlmlab.data.corpus import read_corpus, tokenise_corpus
from dlmlab.data.paths import DataNotFound
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.studies.induction import claims as C
from dlmlab.studies.induction.presets import PRESETS
from dlmlab.studies.induction.train import p_repeated_at, text_epochs
from dlmlab.tasks.repeated import repeated_tokens

MASK = 29


def seqs(B=4, half=10):
    return repeated_tokens(B, half, 5, 29, torch.Generator().manual_seed(0), distinct=True)


# -- rows: the no-source baseline and the far-position control ------------------------------------
def test_neither_context_masks_the_whole_target_half_and_far_positions_are_far():
    x = seqs()
    rows = induction.build_rows(x, MASK, "forward", "neither", per_seq=3)
    assert (rows.noisy[:, 10:] == MASK).all() and (rows.noisy[:, :10] != MASK).all()
    base = induction.build_rows(x, MASK, "reverse", "both", per_seq=3, seed=4)
    far = induction.build_rows(x, MASK, "reverse", "both", per_seq=3, seed=4, far=2)
    assert torch.equal(base.target, far.target)  # paired rows
    for n in range(len(far.target)):
        extra = ((far.noisy[n] == MASK) & (base.noisy[n] != MASK)).nonzero().flatten()
        assert len(extra) == 2 and ((extra - far.target[n]).abs() >= induction.FAR_MIN).all() and (extra < 10).all()
    with pytest.raises(ValueError, match="far"):
        induction.build_rows(x, MASK, "forward", "both", far=-1)


class LeftCopy(torch.nn.Module):
    """Masked oracle: a masked k whose left neighbour is visible copies the token after that neighbour's copy."""

    def forward(self, x):
        B, T = x.shape
        out = torch.zeros(B, T, MASK + 1)
        for b in range(B):
            for k in range(1, T):
                if x[b, k] == MASK and x[b, k - 1] != MASK:
                    for j in range(T - 1):
                        if j != k - 1 and x[b, j] == x[b, k - 1] and x[b, j + 1] != MASK:
                            out[b, k, x[b, j + 1]] = 8.0
        return out


def test_context_gains_of_a_left_only_oracle_are_additive():
    g = induction.context_gains(LeftCopy(), seqs(), MASK, "forward", per_seq=3)
    assert torch.allclose(g["right"], torch.zeros_like(g["right"]))
    assert (g["left"] > 1).all() and torch.allclose(g["both"], g["left"])
    assert induction.additivity(g) == pytest.approx(1.0)
    assert induction.additivity({"left": torch.tensor([1.0]), "right": torch.tensor([1.0]),
                                 "both": torch.tensor([3.0])}) == pytest.approx(1.5)


# -- head sets -------------------------------------------------------------------------------------
def tiny(L=2, H=2):
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=12, d_model=16, n_layers=L, n_heads=H, d_mlp=0,
                                         attn_mask="bidirectional", max_seq_len=16, init_std=0.3)).eval()


def test_heads_above_pool_and_random_sets():
    s = torch.tensor([[0.9, 0.1], [0.5, 0.2], [0.31, 0.3]])
    assert head_sets.heads_above(s, 0.3, min_layer=1) == [(1, 0), (2, 0)]
    pool = head_sets.layer_pool(3, 2, min_layer=1)
    assert pool == [(1, 0), (1, 1), (2, 0), (2, 1)]
    sets = head_sets.random_sets(pool, 2, 30, exclude=[(1, 0), (2, 0)], seed=1)
    assert len(sets) == 30 and all(len(set(x)) == 2 and set(x) != {(1, 0), (2, 0)} for x in sets)
    assert sets == head_sets.random_sets(pool, 2, 30, exclude=[(1, 0), (2, 0)], seed=1)
    with pytest.raises(ValueError, match="differs"):
        head_sets.random_sets([(1, 0)], 1, 3, exclude=[(1, 0)])


def test_set_ablation_matches_direct_ablation_and_controls():
    from dlmlab.analysis.ablation import ablate_heads

    m = tiny()
    x = torch.randint(0, 11, (4, 16), generator=torch.Generator().manual_seed(2))

    def metric(model):
        with torch.no_grad():
            return float(model(x)[..., 3].mean())

    res = head_sets.set_ablation_test(m, metric, [(1, 1)], head_sets.layer_pool(2, 2, 1), kind="zero", n_random=20)
    with ablate_heads(m, [(1, 1)], "zero"):
        direct = metric(m)
    assert res.drop == pytest.approx(metric(m) - direct)
    # the pool holds one other head: the control is exhaustive (that set once), not 20 copies of it
    assert res.exhaustive and res.random_sets == [[(1, 0)]] and res.n_sets == 2 and res.min_p == 0.5
    assert res.p95 == pytest.approx(res.random_drops[0])
    assert res.control().n == 1 and res.to_dict()["control"]["n_draws"] == 1
    empty = head_sets.set_ablation_test(m, metric, [], head_sets.layer_pool(2, 2, 1))
    assert empty.heads == [] and empty.random_drops == []


# -- difference-of-means shift -----------------------------------------------------------------------
def test_nested_masks_and_mean_shift_patch():
    g = torch.Generator().manual_seed(0)
    lo, hi = timestep.nested_masks((64, 32), 0.1, 0.6, g)
    assert (lo <= hi).all() and 0.05 < lo.float().mean() < 0.15 and 0.5 < hi.float().mean() < 0.7
    m = tiny()
    x = torch.randint(0, 11, (16, 16), generator=torch.Generator().manual_seed(0))
    r = timestep.mean_shift_patch(m, x, 11, "blocks.0.resid_post", 0.1, 0.6, n_random=5)
    assert len(r["random_deltas"]) == 5 and r["n_fit_seqs"] == 8 and r["shift_norm"] > 0 and r["delta"] != 0
    assert r == timestep.mean_shift_patch(m, x, 11, "blocks.0.resid_post", 0.1, 0.6, n_random=5)  # seeded
    with pytest.raises(ValueError, match="low"):
        timestep.mean_shift_patch(m, x, 11, low=0.6, high=0.1)


def test_probe_report_has_controls():
    m = tiny()
    x = torch.randint(0, 11, (32, 16), generator=torch.Generator().manual_seed(0))
    rep = timestep.mask_rate_probe(m, x, mask_id=11)
    assert len(rep.r2_pooled) == len(rep.r2_control) == len(rep.points) == 3


# -- claims on hand-built measurement dicts ---------------------------------------------------------
def dlm(L=2, **kw):
    m = {"objective": "dlm", "context": "both", "n_layers": L, "chance": 0.02,
         "accuracy": {d: {c: 0.99 for c in ("left", "right", "both")} for d in ("forward", "reverse")},
         "fold": {"accuracy": 0.99, "folded_accuracy": 0.97},
         "local_offset_scores": {"-2": [[0.0, 0.0, 0.1, 0.1]], "-1": [[0.9, 0.1, 0.0, 0.1]],
                                 "1": [[0.0, 0.8, 0.1, 0.1]], "2": [[0.0, 0.0, 0.1, 0.1]]},
         "prev_token_scores": [[0.9, 0.1, 0.0, 0.1]], "next_token_scores": [[0.0, 0.8, 0.1, 0.1]],
         "prev_token_scores_init": [[0.1] * 4], "next_token_scores_init": [[0.1] * 4],
         "gains": {d: {"left": 1.0, "right": 1.5, "both": 2.4, "ratio": 0.96} for d in ("forward", "reverse")},
         "induction_set_ablation": {"heads": [[1, 2]], "base": 0.99, "drop": 0.6, "random_p95": 0.1,
                                    "random_drops": [0.1] * 200, "threshold": 0.3, "exhaustive": False,
                                    "control": {"n_draws": 200},
                                    "per_seq": {"base": [1.0, 0.9, 1.0, 1.0] * 3, "induction": [0.4, 0.3, 0.5, 0.4] * 3,
                                                "best_other": [0.9, 0.9, 1.0, 0.8] * 3, "best_other_set": [[1, 0]]}},
         "probe": {"r2": [0.2, 0.85, 0.9], "r2_control": [0.0, -0.01, 0.0], "r2_pooled": [0.5, 0.95, 0.95],
                   "t_range": [0.02, 0.5], "rmse": [0.12, 0.05, 0.04], "rmse_control": 0.14},
         "probe_full_range": {"r2": [0.3, 0.9, 0.9], "r2_control": [0.0, 0.0, 0.0], "t_range": [0.0, 1.0]},
         "patch": {"low": 0.05, "high": 0.5, "delta": 0.5, "random_p95": 0.2, "random_deltas": [0.1] * 200,
                   "entropy_clean": 1.0},
         "local_window": {"none": 0.9, "pm1": 0.5, "pm2_only": 0.6, "pm1_pm2": 0.2, "far2": 0.88},
         "top_induction_head": [1, 2],
         "composition_into_top_head": {"Q": [[0.5, 0.4, 0.1, 0.2], [0] * 4], "K": [[0.3, 0.3, 0.2, 0.1], [0] * 4]},
         "composition_into_top_head_init": {"Q": [[0.2] * 4, [0] * 4], "K": [[0.15] * 4, [0] * 4]}}
    m.update(kw)
    return m


def verdict(fn, **kw):
    return fn({"dlm_L2": dlm(**kw)}).holds


def test_prev_next_claim_needs_two_distinct_heads_above_half():
    assert verdict(C.prev_and_next_token_heads_in_layer0)
    assert not verdict(C.prev_and_next_token_heads_in_layer0, next_token_scores=[[0.9, 0.1, 0.0, 0.0]])  # same head
    assert not verdict(C.prev_and_next_token_heads_in_layer0, prev_token_scores=[[0.45, 0.1, 0.0, 0.1]])


def test_ablation_claim_needs_drop_and_beating_random_sets():
    assert verdict(C.induction_heads_ablation_drop)
    base = dlm()["induction_set_ablation"]
    ps = base["per_seq"]
    # the best other set hurts as much: not above it (issue 34: paired per-sequence interval, not a permutation)
    assert not verdict(C.induction_heads_ablation_drop,
                       induction_set_ablation={**base, "per_seq": {**ps, "best_other": ps["induction"]}})
    small = [b - 0.15 for b in ps["base"]]  # a drop of 0.15 < 0.2 (the other set's drop is smaller still)
    assert not verdict(C.induction_heads_ablation_drop,
                       induction_set_ablation={**base, "per_seq": {**ps, "induction": small, "best_other": ps["base"]}})
    assert not verdict(C.induction_heads_ablation_drop, induction_set_ablation={**base, "per_seq": None})
    assert not verdict(C.induction_heads_ablation_drop, induction_set_ablation={**base, "heads": []})
    low = {d: {c: 0.1 for c in ("left", "right", "both")} for d in ("forward", "reverse")}
    assert verdict(C.induction_heads_ablation_drop, accuracy=low) is None  # no induction: precondition


def test_probe_patch_window_and_composition_claims():
    assert verdict(C.mask_rate_probe_r2)
    pr = dlm()["probe"]
    assert not verdict(C.mask_rate_probe_r2, probe={**pr, "rmse": [0.05, 0.13, 0.01]})  # after block 0 only
    assert not verdict(C.mask_rate_probe_r2, probe_full_range={**dlm()["probe_full_range"], "r2": [0.9, 0.8, 0.9]})
    assert C.RMSE_LEVEL == pytest.approx(((1 - 0.82) / 12) ** 0.5)  # R^2 0.82 for rates uniform on [0, 1]
    assert verdict(C.mask_rate_patch_raises_entropy)
    assert not verdict(C.mask_rate_patch_raises_entropy, patch={**dlm()["patch"], "delta": 0.05})
    assert verdict(C.local_window_sensitivity)
    assert not verdict(C.local_window_sensitivity, local_window={**dlm()["local_window"], "far2": 0.55})
    assert not verdict(C.local_window_sensitivity, local_window={**dlm()["local_window"], "pm1_pm2": 0.75})
    assert verdict(C.q_and_k_composition_in_induction_heads)
    comp = {"Q": [[0.5, 0.4, 0.6, 0.2], [0] * 4], "K": [[0.3, 0.3, 0.2, 0.1], [0] * 4]}  # other head H2 wins Q
    assert not verdict(C.q_and_k_composition_in_induction_heads, composition_into_top_head=comp)
    init = {"Q": [[0.2, 0.2, 0.5, 0.2], [0] * 4], "K": [[0.15] * 4, [0] * 4]}  # the untrained model scores as high
    assert not verdict(C.q_and_k_composition_in_induction_heads, composition_into_top_head_init=init)


# -- corpus and curriculum -----------------------------------------------------------------------------
def test_corpus_reads_text_jsonl_folders_env_and_alternatives(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("hello")
    (tmp_path / "d" / "b.jsonl").write_text(json.dumps({"text": "world"}) + "\n\n" + json.dumps({"text": "!"}) + "\n")
    c = read_corpus(str(tmp_path / "d"), separator="|")
    assert c.text == "hello|world|!" and len(c.files) == 2
    monkeypatch.setenv("H5_CORPUS", str(tmp_path / "d" / "a.txt"))
    assert read_corpus("$H5_CORPUS+$H5_CORPUS", separator=" ").text == "hello hello"
    assert read_corpus(f"$H5_UNSET|{tmp_path / 'd' / 'a.txt'}").text == "hello"
    assert read_corpus(str(tmp_path / "d"), max_chars=3).text == "hel"
    with pytest.raises(DataNotFound):
        read_corpus(str(tmp_path / "nope"))
    ids = tokenise_corpus(str(tmp_path / "d"), "char", val_fraction=0.2)
    assert ids.n_tokens == len(c.text) + 2 * 2 - 2 and ids.tokenizer.vocab_size >= 8


def test_curriculum_text_first_then_repeat_mix():
    assert PRESETS["cpu"].text_steps == 0 and p_repeated_at(PRESETS["cpu"], 0) == PRESETS["cpu"].p_repeated
    p = dataclasses.replace(PRESETS["cpu"], text_steps=6000)  # the ladder's curriculum
    assert p_repeated_at(p, 1) == 0.0 and p_repeated_at(p, p.text_steps - 1) == 0.0
    assert p_repeated_at(p, p.text_steps) == p.p_repeated and p.seq_len >= 64
    q = dataclasses.replace(p, steps=10, text_steps=5, batch_size=2, seq_len=32, min_half=8, p_repeated=0.5)
    assert text_epochs(q, 100) == pytest.approx((5 * 2 + 5 * 2 * 0.5) * 32 / 100)


def test_corpus_reads_parquet_and_names_bad_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dlmlab.errors import UserError

    pq.write_table(pa.table({"text": ["first doc", "", "second doc"], "id": [1, 2, 3]}), tmp_path / "c.parquet")
    assert read_corpus(str(tmp_path / "c.parquet"), separator="|").text == "first doc|second doc"
    with pytest.raises(UserError, match="no column 'body'"):
        read_corpus(str(tmp_path / "c.parquet"), text_field="body")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(UserError, match="bad.parquet: not a readable Parquet file"):
        read_corpus(str(tmp_path / "bad.parquet"))
    (tmp_path / "d.jsonl").write_text('{"text": "ok"}\n{oops\n')
    with pytest.raises(UserError, match="d.jsonl: line 2 is not valid JSON"):
        read_corpus(str(tmp_path / "d.jsonl"))


def test_the_recipe_pilot_script_reports_the_step_a_model_learns(capsys):
    """scripts/induction_pilot.py (docs/induction.md, "Budget"): a few steps of the cpu recipe's model, its
    accuracy every `--every` steps and whether the learned level was reached."""
    import runpy
    import sys

    argv = sys.argv
    sys.argv = ["induction_pilot.py", "--objective", "ar", "--steps", "4", "--every", "2"]
    try:
        with pytest.raises(SystemExit) as e:
            runpy.run_path("scripts/induction_pilot.py", run_name="__main__")
    finally:
        sys.argv = argv
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "step 2 accuracy" in out and "step 4 accuracy" in out and "learned level 0.902 not reached in 4 steps" in out
