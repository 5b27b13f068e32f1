"""Speed measurements: interleaved rounds, medians, ratios (no real timing claims; fake clocks)."""

import pytest

from dlmlab.metrics import speed


def test_interleaved_rounds_rotate_the_order():
    calls = []
    fns = {n: (lambda n=n: calls.append(n)) for n in "abc"}
    times = speed.interleaved_times(fns, repeats=3, warmup=1)
    assert {n: len(t) for n, t in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert "".join(calls) == "abc" + "abc" + "bca" + "cab"  # warmup, then each round starts one later
    with pytest.raises(ValueError):
        speed.interleaved_times(fns, repeats=0)


def test_a_burst_of_load_slows_both_rounds_alike(monkeypatch):
    """A fake clock: function a takes 1 s, b 2 s, and the second round runs 10x slower (load).
    Interleaved, both medians see the slow round once; the ratio of medians stays 2."""
    clock = {"t": 0.0, "calls": 0}
    cost = {"a": 1.0, "b": 2.0}

    def make(name):
        def fn():
            clock["calls"] += 1
            slow = 10.0 if 3 <= clock["calls"] <= 4 else 1.0  # the second round (calls 3 and 4) is slow
            clock["t"] += cost[name] * slow
        return fn

    monkeypatch.setattr(speed.time, "perf_counter", lambda: clock["t"])
    res = speed.throughputs({"a": make("a"), "b": make("b")}, n_tokens=10, repeats=3, warmup=0)
    assert res["a"]["times_s"] == [1.0, 10.0, 1.0] and res["b"]["times_s"] == [2.0, 20.0, 2.0]
    assert speed.speedup(res["a"], res["b"]) == pytest.approx(2.0)
    assert res["a"]["interleaved"] and res["a"]["tokens_per_s"] == pytest.approx(10.0)
    assert speed.speedup({}, res["b"]) is None


def test_tokens_per_second_alone_is_not_interleaved():
    r = speed.tokens_per_second(lambda: None, n_tokens=5, repeats=2)
    assert r["interleaved"] is False and len(r["times_s"]) == 2 and r["n_tokens"] == 5
    with pytest.raises(ValueError):
        speed.tokens_per_second(lambda: None, n_tokens=0)
