"""The completion tasks of the decoding benchmark: layout, induction and sorting pairs, exact-match scoring,
tokens up to the end token, and the benchmark's per-row forward count (fast; no training)."""

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.tasks.completion import CompletionVocab, exact_match, induction_pairs, pair, tokens_to_end
from dlmlab.tasks.sorting import sorting_pairs

VOC = CompletionVocab(8)


def test_vocab_layout():
    assert (VOC.sep, VOC.end, VOC.mask_id, VOC.model_vocab) == (8, 9, 10, 11)
    with pytest.raises(ConfigError, match="n_symbols"):
        CompletionVocab(1)


def test_induction_pairs_repeat_the_prompt_and_end():
    g = torch.Generator().manual_seed(0)
    prompt, target = induction_pairs(5, 6, VOC, g)
    assert prompt.shape == target.shape == (5, 7)
    assert (prompt[:, -1] == VOC.sep).all() and (target[:, -1] == VOC.end).all()
    assert torch.equal(prompt[:, :-1], target[:, :-1])
    assert int(prompt[:, :-1].max()) < VOC.n_symbols and int(prompt.min()) >= 0
    again = induction_pairs(5, 6, VOC, torch.Generator().manual_seed(0))
    assert torch.equal(again[0], prompt)  # seeded


def test_sorting_pairs_sort_with_repeats():
    prompt, target = sorting_pairs(64, 10, VOC, torch.Generator().manual_seed(1))
    body, out = prompt[:, :-1], target[:, :-1]
    assert torch.equal(out, body.sort(1).values)
    assert (out[:, 1:] >= out[:, :-1]).all()
    assert bool(((body[:, :, None] == body[:, None, :]).sum((1, 2)) > 10).any())  # some rows hold repeats
    assert (target[:, -1] == VOC.end).all()


def test_pair_checks_shapes():
    with pytest.raises(ValueError, match="body and completion"):
        pair(torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long), VOC)


def test_tokens_to_end_counts_through_the_first_end():
    E = VOC.end
    gen = torch.tensor([[1, 2, E, 3], [E, E, 1, 1], [1, 2, 3, 4]])
    assert tokens_to_end(gen, E).tolist() == [3, 1, 4]  # no end token: the whole row


def test_exact_match_up_to_the_target_end():
    E = VOC.end
    target = torch.tensor([[1, 2, E], [3, 4, E], [5, 6, E], [1, 1, E]])
    gen = torch.tensor([[1, 2, E, 7],  # later tokens ignored
                        [3, 4, 5, 7],  # no end where the target has it
                        [5, E, E, E],  # ends early
                        [1, 1, E, E]])
    assert exact_match(gen, target, E).tolist() == [True, False, False, True]
    assert exact_match(gen[:, :2], target, E).tolist() == [False] * 4  # too short to hold the end token
    with pytest.raises(ValueError, match="generated and target"):
        exact_match(gen[0], target, E)


def _bench():
    """benchmarks/bench_sampling.py as a module (registered first: dataclasses look their module up)."""
    if "bench_sampling" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sampling.py"
        spec = importlib.util.spec_from_file_location("bench_sampling", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench_sampling"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["bench_sampling"]


def test_row_forwards_count_distinct_commit_steps_up_to_the_end():
    bench = _bench()
    E = VOC.end

    class Res:
        kv_reuse, exactness = "none", "exact"

    when = torch.tensor([[0, 0, 1, 3], [2, 0, 2, 2]])  # commit step of each generated position
    out = torch.tensor([[1, 2, E, 4], [1, 1, 1, E]])  # row 0 ends at position 2: steps {0, 1}; row 1: {0, 2}
    assert bench.row_forwards(when, out, E, Res()).tolist() == [2, 2]


def test_task_decoders_count_forwards_per_row():
    """A bidirectional model: threshold decoding with 'none' cache; per-row forwards never exceed the calls,
    and a fixed-steps decoder runs exactly its steps per row."""
    bench = _bench()
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=VOC.model_vocab, d_model=16, n_layers=1, n_heads=2, max_seq_len=16,
                            attn_mask="bidirectional")
    dm = Transformer(cfg).eval()
    ar = Transformer(TransformerConfig(vocab_size=VOC.model_vocab, d_model=16, n_layers=1, n_heads=2,
                                       max_seq_len=16)).eval()
    prompt, _ = induction_pairs(3, 4, VOC, torch.Generator().manual_seed(0))
    specs = {"t": dict(threshold=0.9, kv_reuse="none"), "s": dict(steps=2, kv_reuse="none")}
    fns = bench.task_decoders(ar, dm, VOC, 5, specs)
    out, calls, per_row = fns["t"](prompt, track=True)
    assert out.shape == (3, 5) and (per_row <= calls).all() and (per_row >= 1).all()
    assert fns["t"](prompt)[2] is None and torch.equal(fns["t"](prompt)[0], out)  # untracked: same tokens
    out, calls, per_row = fns["s"](prompt, track=True)
    assert calls == 2 and (per_row <= 2).all()
    out, calls, per_row = fns["AR (KV cache)"](prompt, track=True)
    assert calls == 5 and torch.equal(per_row, tokens_to_end(out, VOC.end))


@pytest.mark.parametrize("kind", ["ar", "mdlm"])
def test_task_models_are_seeded_and_cached_by_settings_hash(tmp_path, kind):
    bench = _bench()
    w = bench.Workload("sorting", n=3, n_symbols=4, d_model=8, n_layers=1, steps=2, batch=4)
    a = bench.task_model(w, kind, tmp_path)
    files = sorted(tmp_path.iterdir())
    assert len(files) == 1 and files[0].name.startswith(f"sorting-{kind}-") and not a.training
    assert a.cfg.attn_mask == ("causal" if kind == "ar" else "bidirectional")
    b = bench.task_model(w, kind, tmp_path)  # loaded, not retrained
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    fresh = bench.task_model(w, kind, tmp_path / "other")  # retrained from the same seed: the same weights
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), fresh.state_dict().values()))
    bench.task_model(dataclasses.replace(w, steps=3), kind, tmp_path)
    assert len(list(tmp_path.glob("*.pt"))) == 2  # other settings, another file


def test_judge_takes_the_fastest_decoder_within_the_bound():
    bench = _bench()
    rows = [{"batch": 1, "name": "AR (KV cache)", "rel": 1.0, "acc": 1.0},
            {"batch": 1, "name": "fast, wrong", "rel": 9.0, "acc": 0.5},
            {"batch": 1, "name": "slow, right", "rel": 2.0, "acc": 1.0},
            {"batch": 16, "name": "right", "rel": 1.5, "acc": 1.0}]
    ok = lambda r: r["acc"] >= 0.99  # noqa: E731
    met, line = bench.judge(rows, 1, ok, "induction", "exact match >= 0.99", "accuracy")
    assert met is False and "NOT met" in line and "'slow, right' (2.00x)" in line  # 3x needed at batch 1
    met, line = bench.judge(rows, 16, ok, "induction", "exact match >= 0.99", "accuracy")
    assert met is True and "batch 16: >= 1x AR" in line
    met, line = bench.judge(rows, 1, lambda r: False, "induction", "b", "accuracy")
    assert met is False and "no diffusion decoder is within the accuracy bound" in line
    assert bench.judge(rows, 4, ok, "induction", "b", "accuracy")[0] is None  # no target at batch 4
