"""SQLite store of pairwise choices and the win rates computed from it."""

from __future__ import annotations

import datetime as _dt
import math
import sqlite3
import threading
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from dlmlab.errors import UserError
from dlmlab.rating.samples import Pair, Sample

SCHEMA = """
CREATE TABLE IF NOT EXISTS choices (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    pair_key TEXT NOT NULL,
    prompt TEXT NOT NULL,
    left_method TEXT NOT NULL,
    right_method TEXT NOT NULL,
    left_sample TEXT NOT NULL,
    right_sample TEXT NOT NULL,
    choice TEXT NOT NULL CHECK (choice IN ('left', 'right', 'tie')),
    winner TEXT
);
CREATE INDEX IF NOT EXISTS choices_pair ON choices(pair_key);
"""

CHOICES = ("left", "right", "tie")


@dataclass
class WinRate:
    """``win_rate`` = (wins + ties / 2) / comparisons, with a 95% Wilson interval on it."""

    method: str
    comparisons: int
    wins: int
    ties: int
    losses: int

    @property
    def win_rate(self) -> float:
        return (self.wins + 0.5 * self.ties) / self.comparisons if self.comparisons else float("nan")

    @property
    def ci95(self) -> tuple[float, float]:
        n = self.comparisons
        if not n:
            return float("nan"), float("nan")
        p, z = self.win_rate, 1.96
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return max(0.0, centre - half), min(1.0, centre + half)


class RatingsDbError(UserError, ValueError):
    """A ratings database file that SQLite cannot use."""


class RatingStore:
    """Choices in ``path`` (created if absent).  Thread-safe: one short connection per call."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            with self._connect() as con:
                con.executescript(SCHEMA)
        except sqlite3.DatabaseError as e:
            raise RatingsDbError(f"{self.path} is not a usable SQLite ratings database: {e}; "
                                 "use another --db or move the file aside") from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection that commits on success and is always closed."""
        con = sqlite3.connect(self.path, timeout=10)
        try:
            with con:
                yield con
        finally:
            con.close()

    def record(self, pair: Pair, left: Sample, right: Sample, choice: str) -> int:
        """Store one choice (``left``, ``right`` or ``tie``); returns its row id."""
        if choice not in CHOICES:
            raise ValueError(f"choice must be one of {CHOICES}, got {choice!r}")
        if {left.key, right.key} != {pair.a.key, pair.b.key}:
            raise ValueError("left/right samples do not belong to this pair")
        winner = {"left": left.method, "right": right.method, "tie": None}[choice]
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        with self._lock, self._connect() as con:
            cur = con.execute(
                "INSERT INTO choices (created, pair_key, prompt, left_method, right_method, left_sample, "
                "right_sample, choice, winner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (now, pair.key, pair.prompt, left.method, right.method, left.text, right.text, choice, winner),
            )
            return int(cur.lastrowid)

    def rated_keys(self) -> set[str]:
        with self._lock, self._connect() as con:
            return {r[0] for r in con.execute("SELECT DISTINCT pair_key FROM choices")}

    def rows(self) -> list[tuple[str, str, str]]:
        """``(left_method, right_method, choice)`` for every stored choice."""
        with self._lock, self._connect() as con:
            return list(con.execute("SELECT left_method, right_method, choice FROM choices ORDER BY id"))

    def count(self) -> int:
        with self._lock, self._connect() as con:
            return int(con.execute("SELECT COUNT(*) FROM choices").fetchone()[0])

    def method_pair_counts(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = defaultdict(int)
        for lm, rm, _ in self.rows():
            out[tuple(sorted([lm, rm]))] += 1  # type: ignore[index]
        return out

    def win_rates(self) -> list[WinRate]:
        """Per method, best first."""
        stats: dict[str, WinRate] = {}
        for lm, rm, choice in self.rows():
            for me, side in ((lm, "left"), (rm, "right")):
                w = stats.setdefault(me, WinRate(me, 0, 0, 0, 0))
                w.comparisons += 1
                if choice == "tie":
                    w.ties += 1
                elif choice == side:
                    w.wins += 1
                else:
                    w.losses += 1
        return sorted(stats.values(), key=lambda w: (-w.win_rate, w.method))

    def head_to_head(self) -> dict[tuple[str, str], tuple[int, int, int]]:
        """``(a, b)`` with a < b -> (a wins, ties, b wins)."""
        out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        for lm, rm, choice in self.rows():
            a, b = sorted([lm, rm])
            winner = {"left": lm, "right": rm}.get(choice)
            out[(a, b)][0 if winner == a else (2 if winner == b else 1)] += 1
        return {k: tuple(v) for k, v in sorted(out.items())}  # type: ignore[misc]


def format_win_rates(store: RatingStore) -> str:
    """Plain-text win-rate table plus head-to-head counts."""
    rates = store.win_rates()
    if not rates:
        return f"no choices stored in {store.path} yet"
    rows = [["method", "win rate", "95% CI", "wins", "ties", "losses", "comparisons"]]
    for w in rates:
        lo, hi = w.ci95
        rows.append([w.method, f"{w.win_rate:.3f}", f"[{lo:.2f}, {hi:.2f}]", str(w.wins), str(w.ties),
                     str(w.losses), str(w.comparisons)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(wd) if i == 0 else c.rjust(wd) for i, (c, wd) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    lines += ["", "head to head (A wins / ties / B wins):"]
    for (a, b), (wa, t, wb) in store.head_to_head().items():
        lines.append(f"  {a} vs {b}: {wa} / {t} / {wb}")
    lines += ["", f"{store.count()} choices in {store.path}; win rate = (wins + ties/2) / comparisons"]
    return "\n".join(lines)
