"""Throughput and sample-efficiency measurements.

Speeds that are compared are timed together: :func:`interleaved_times` runs every function once per
round (the order rotated each round), so a change of load on the machine slows all of them alike
instead of whichever happened to run during it; each throughput comes from the median of its rounds
and a comparison is the ratio of those medians (:func:`speedup`).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Mapping, Sequence


def interleaved_times(fns: Mapping[str, Callable[[], object]], repeats: int = 5,
                      warmup: int = 1) -> dict[str, list[float]]:
    """Wall times [repeats] of each function, measured in ``repeats`` rounds that each run every function
    once; round ``r`` starts at the ``r``-th function (rotation), after ``warmup`` untimed rounds."""
    if repeats < 1 or warmup < 0 or not fns:
        raise ValueError(f"need functions, repeats >= 1 and warmup >= 0, got {len(fns)}, {repeats}, {warmup}")
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def throughputs(fns: Mapping[str, Callable[[], object]], n_tokens: int | Mapping[str, int], repeats: int = 5,
                warmup: int = 1) -> dict[str, dict]:
    """Tokens/s of each function (``n_tokens`` generated per call, one count or one per name) from the median
    of its interleaved rounds: ``{name: {tokens_per_s, median_s, times_s, n_tokens, repeats, interleaved}}``."""
    counts = {name: n_tokens if isinstance(n_tokens, int) else n_tokens[name] for name in fns}
    if min(counts.values()) < 1:
        raise ValueError(f"n_tokens must be >= 1, got {counts}")
    times = interleaved_times(fns, repeats, warmup)
    out = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        out[name] = {"tokens_per_s": counts[name] / med, "median_s": med, "times_s": ts, "n_tokens": counts[name],
                     "repeats": repeats, "interleaved": len(fns) > 1}
    return out


def tokens_per_second(fn: Callable[[], object], n_tokens: int, repeats: int = 3, warmup: int = 1) -> dict:
    """Run ``fn`` ``warmup`` + ``repeats`` times; tokens/s from the median wall time of the timed runs.
    Alone, not interleaved: compare speeds with :func:`throughputs` instead."""
    if repeats < 1 or n_tokens < 1:
        raise ValueError("repeats and n_tokens must be >= 1")
    return throughputs({"fn": fn}, n_tokens, repeats, warmup)["fn"]


def speedup(fast: dict, slow: dict) -> float | None:
    """Ratio of the median throughputs ``fast / slow`` (each a :func:`throughputs` entry); None if one is missing."""
    a, b = fast.get("tokens_per_s"), slow.get("tokens_per_s")
    return None if a is None or b is None else a / b


def steps_to_threshold(history: Sequence[dict], key: str, threshold: float) -> int | None:
    """First ``step`` whose ``history[key] <= threshold`` (rows without ``key`` skipped), or None if never."""
    for row in history:
        v = row.get(key)
        if v is not None and v <= threshold:
            return int(row["step"])
    return None
