"""Tasks of the state study: Parity, S3, Dyck, Code-Depth (labels checked by brute force)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.tasks.code_depth import VOCAB, CodeDepthTask, encode_source
from dlmlab.tasks.dyck import DyckTask
from dlmlab.tasks.parity import ParityTask
from dlmlab.tasks.s3 import IDENTITY, PERMS, S3Task, compose


def g(seed=0):
    return torch.Generator().manual_seed(seed)


def test_parity_labels_and_corrupt():
    t = ParityTask()
    x, y = t.sample(8, 30, g())
    for b in range(8):
        assert y[b].tolist() == [sum(x[b, : i + 1].tolist()) % 2 for i in range(30)]
    c = t.corrupt(x, 10)
    yc = t.labels(c)
    assert (yc[:, :10] == y[:, :10]).all() and (yc[:, 10:] != y[:, 10:]).all()
    with pytest.raises(ValueError, match="0 or 1"):
        t.labels(torch.tensor([[0, 2]]))
    with pytest.raises(ConfigError):
        t.sample(0, 5)


def test_s3_group_and_labels():
    assert len(PERMS) == 6 and PERMS[IDENTITY] == (0, 1, 2)
    for a, b, c in itertools.product(range(6), repeat=3):  # associativity
        assert compose(compose(a, b), c) == compose(a, compose(b, c))
    assert any(compose(a, b) != compose(b, a) for a in range(6) for b in range(6))  # non-abelian
    t = S3Task()
    x, y = t.sample(5, 25, g(1))
    for b in range(5):
        state = (0, 1, 2)
        for i, tok in enumerate(x[b].tolist()):
            p = PERMS[tok]
            state = tuple(p[state[j]] for j in range(3))  # apply the new element after the prefix
            assert PERMS[int(y[b, i])] == state
    c = t.corrupt(x, 7)
    assert (c[:, 7] != x[:, 7]).all() and (c[:, :7] == x[:, :7]).all()
    yc = t.labels(c)
    assert (yc[:, 7:] != y[:, 7:]).all()
    with pytest.raises(ValueError):
        t.labels(torch.tensor([[6]]))


def test_dyck_valid_prefixes_and_depth():
    t = DyckTask(k=3, max_depth=4)
    assert t.vocab_size == 6 and t.n_classes == 5
    x, y = t.sample(64, 50, g(2))
    assert int(y.min()) >= 0 and int(y.max()) == 4
    for b in range(64):
        stack = []
        for i, tok in enumerate(x[b].tolist()):
            if tok % 2 == 0:
                stack.append(tok // 2)
            else:
                assert stack.pop() == tok // 2  # closes match the innermost open
            assert len(stack) == y[b, i] <= 4
    assert (t.labels(x) == y).all()
    with pytest.raises(ValueError, match="Dyck prefix"):
        t.labels(torch.tensor([[1]]))
    with pytest.raises(ConfigError):
        DyckTask(max_depth=0)


def test_code_depth_encoding():
    src = "def f(a, b):\n    if a:\n        return [b,\n  (1)]\n    return 0\nx = 1\n"
    ids, depth = encode_source(src)
    toks = [VOCAB[i] for i in ids]
    got = list(zip(toks, depth.tolist()))
    assert got[:8] == [("def", 0), ("NAME", 0), ("(", 1), ("NAME", 1), (",", 1), ("NAME", 1), (")", 0), (":", 0)]
    # inside "return [b, (1)]" at indent 2: "[" -> 3, "(" -> 4
    assert ("(", 4) in got and ("NUMBER", 4) in got and ("]", 2) in got
    assert got[-4:] == [("NAME", 0), ("=", 0), ("NUMBER", 0), ("NEWLINE", 0)]
    assert len(VOCAB) == len(set(VOCAB))


def test_code_depth_split_and_windows():
    t = CodeDepthTask(max_files=4)
    tr, te = t.files("train"), t.files("test")
    assert tr and te and not set(tr) & set(te)
    assert all(str(f).endswith(".py") for f in tr + te)
    x, y = t.sample(16, 40, g(3), split="test")
    assert x.shape == y.shape == (16, 40)
    assert int(x.max()) < t.vocab_size and int(y.max()) <= t.max_depth
    # windows start at depth 0, so each label follows from the window itself: depth changes only at
    # INDENT / DEDENT / brackets
    step = {"INDENT": 1, "DEDENT": -1, "(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
    ok = y.numpy() < t.max_depth
    rec = np.cumsum([[step.get(VOCAB[i], 0) for i in row] for row in x.tolist()], 1)
    assert (rec[ok] == y.numpy()[ok]).all()
    with pytest.raises(ConfigError, match="split"):
        t.sample(2, 10, g(), split="valid")


def test_corruptions_change_the_final_label():
    """Every task's corruption at one position moves the labels from there on (patching needs a gap)."""
    gen = g(5)
    for task, n in [(ParityTask(), 16), (S3Task(), 16), (DyckTask(k=2, max_depth=10), 64),
                    (CodeDepthTask(max_files=4), 400)]:
        x, y = task.sample(n, 40, gen, split="test") if isinstance(task, CodeDepthTask) else task.sample(n, 40, gen)
        assert (task.labels(x) == y).all(), task.name
        ok = task.corruptible(x, 20)
        assert ok.shape == (n,) and ok.sum() >= 2, task.name
        c = task.corrupt(x[ok], 20)
        assert (c[:, :20] == x[ok][:, :20]).all() and (c[:, 21:] == x[ok][:, 21:]).all()
        yc = task.labels(c)
        assert (yc[:, :20] == y[ok][:, :20]).all() and (yc[:, -1] != y[ok][:, -1]).all(), task.name
    # Dyck: a flip moves the depth by exactly 2; rows leaving [0, max_depth] are refused
    t = DyckTask(k=2, max_depth=3)
    x = torch.tensor([[0, 1, 0, 2], [0, 2, 4 % 4, 3]])
    assert t.corruptible(x, 1).tolist() == [False, True]  # row 0 would go below depth 0
    assert (t.labels(t.corrupt(x[1:], 1)) - t.labels(x[1:]))[0, 1:].tolist() == [-2, -2, -2]
    # Code-Depth: only depth-changing tokens are corrupted (a NAME at pos is not)
    from dlmlab.tasks.code_depth import TOKEN_ID

    t = CodeDepthTask(max_files=1)
    x = torch.tensor([[TOKEN_ID["("], TOKEN_ID["NAME"], TOKEN_ID["("], TOKEN_ID["("]],
                      [TOKEN_ID["("], TOKEN_ID["NAME"], TOKEN_ID["("], TOKEN_ID[")"]]])
    assert t.corruptible(x, 1).tolist() == [False, False]  # NAME changes no depth
    assert t.corruptible(x, 2).tolist() == [True, False]  # row 1 would end below depth 0
    assert t.labels(t.corrupt(x[:1], 2)).tolist() == [[1, 1, 0, 1]] and t.labels(x[:1]).tolist() == [[1, 1, 2, 3]]
