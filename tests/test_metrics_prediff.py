"""Metrics: Rep-n, Self-BLEU, MAUVE on local features, AR NLL, LAMBADA-style accuracy, speed helpers."""

import json
import math

import numpy as np
import pytest
import torch

from dlmlab.metrics import (ar_nll, find_lambada, generative_perplexity, last_word_accuracy, mauve_score,
                            mean_pooled_features, read_passages, rep_n, self_bleu, split_last_word,
                            steps_to_threshold, tokens_per_second)
from dlmlab.models import Transformer, TransformerConfig


def test_rep_n_counts_repeated_ngrams():
    assert rep_n([[1, 2, 3, 4, 5, 6]], 4) == 0.0
    assert rep_n([[1, 2, 1, 2, 1, 2]], 2) == pytest.approx(1 - 2 / 5)
    assert rep_n([[7] * 10], 4) == pytest.approx(1 - 1 / 7)
    with pytest.raises(ValueError):
        rep_n([[1, 2]], 4)


def test_self_bleu_high_for_copies_low_for_diverse():
    same = ["the cat sat on the mat today"] * 4
    diverse = ["the cat sat on the mat", "a dog ran in a park", "rain fell over grey hills", "ships sail north at dawn"]
    assert self_bleu(same) == pytest.approx(100.0)
    assert self_bleu(diverse) < 20
    with pytest.raises(ValueError):
        self_bleu(["one"])


def test_mauve_separates_distributions_from_local_features():
    rng = np.random.default_rng(0)
    p = rng.normal(size=(120, 8))
    assert mauve_score(p, rng.normal(size=(120, 8))) > 0.8
    assert mauve_score(p, rng.normal(loc=3.0, size=(120, 8))) < 0.3


def tiny_lm(vocab=30):
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=vocab, d_model=32, n_layers=2, n_heads=4, d_mlp=64, max_seq_len=32)).double()


def test_mean_pooled_features_ignore_padding():
    m = tiny_lm()
    f = mean_pooled_features(m, [[1, 2, 3], [4, 5, 6, 7, 8]], batch=2)
    g = mean_pooled_features(m, [[1, 2, 3]], batch=1)
    assert f.shape == (2, 32)
    np.testing.assert_allclose(f[0], g[0], atol=1e-5)


def test_ar_nll_matches_manual_cross_entropy():
    m = tiny_lm()
    x = torch.randint(0, 30, (3, 10))
    logits = m(x)
    lp = logits.log_softmax(-1)
    manual = -lp[:, 3:9].gather(-1, x[:, 4:10, None]).mean().item()
    assert ar_nll(m, x, prompt_len=4) == pytest.approx(manual, abs=1e-9)
    assert generative_perplexity(m, x, 4) == pytest.approx(math.exp(manual), rel=1e-9)
    with pytest.raises(ValueError, match="prompt_len"):
        ar_nll(m, x, prompt_len=10)


def test_lambada_local_file_and_skip(tmp_path, monkeypatch):
    f = tmp_path / "lambada" / "lambada_test.jsonl"
    f.parent.mkdir()
    (tmp_path / "README.md").write_text("x")
    f.write_text("\n".join(json.dumps({"text": t}) for t in ["a b c", "a b d"]))
    monkeypatch.setenv("DLMLAB_DATA", str(tmp_path))
    assert find_lambada() == f
    assert split_last_word("hello big world") == ("hello big", " world")

    class Tok:
        def encode(self, s):
            return [ord(c) for c in s]

    def predict(ctx, n):  # always says " c"
        return torch.tensor([ord(" "), ord("c")][:n])

    res = last_word_accuracy(predict, Tok(), read_passages(f))
    assert res == {"accuracy": 0.5, "n": 2}
    f.unlink()
    assert find_lambada() is None


def test_speed_helpers(monkeypatch):
    import types

    import dlmlab.metrics.speed as speed

    hist = [{"step": 10, "eval_ppl": 9.0}, {"step": 20}, {"step": 30, "eval_ppl": 4.0}, {"step": 40, "eval_ppl": 3.0}]
    assert steps_to_threshold(hist, "eval_ppl", 5.0) == 30
    assert steps_to_threshold(hist, "eval_ppl", 1.0) is None
    # a clock that each call advances by a known time: one untimed warm-up call, then three timed ones
    clock, took = [0.0], iter([0.5, 0.2, 0.4, 0.3])

    def fn():
        clock[0] += next(took)

    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    r = tokens_per_second(fn, n_tokens=100, repeats=3)
    assert r["times_s"] == pytest.approx([0.2, 0.4, 0.3]) and r["tokens_per_s"] == pytest.approx(100 / 0.3)  # median
