"""Throughput and sample-efficiency measurements."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence


def tokens_per_second(fn: Callable[[], object], n_tokens: int, repeats: int = 3, warmup: int = 1) -> dict:
    """Run ``fn`` ``warmup`` + ``repeats`` times; tokens/s from the median wall time of the timed runs."""
    if repeats < 1 or n_tokens < 1:
        raise ValueError("repeats and n_tokens must be >= 1")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"tokens_per_s": n_tokens / med, "median_s": med, "times_s": times, "n_tokens": n_tokens}


def steps_to_threshold(history: Sequence[dict], key: str, threshold: float) -> int | None:
    """First ``step`` whose ``history[key] <= threshold`` (rows without ``key`` skipped), or None if never."""
    for row in history:
        v = row.get(key)
        if v is not None and v <= threshold:
            return int(row["step"])
    return None
