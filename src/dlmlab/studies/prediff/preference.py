"""Human preference: the blind pairwise ratings of ``dlmlab rate RUN`` (``RUN/ratings.sqlite``) in the report.

The study reports how often raters prefer PreDiff samples to each other system's; here every pair of
sample columns that was rated gets its head-to-head counts and the first one's win rate ((wins + ties / 2)
/ comparisons) with a 95% Wilson interval.  Rerunning ``dlmlab reproduce prediff --out RUN`` after rating
reuses every finished run and rewrites the report with these numbers.
"""

from __future__ import annotations

from pathlib import Path

from dlmlab.rating.store import RatingStore, WinRate
from dlmlab.report import Table

RATINGS_FILE = "ratings.sqlite"


def human_preference(out: Path) -> dict | None:
    """{"pairs": [{a, b, a_wins, ties, b_wins, a_win_rate, interval_95}], "choices": n} or None without ratings."""
    db = Path(out) / RATINGS_FILE
    if not db.exists():
        return None
    store = RatingStore(db)
    pairs = []
    for (a, b), (wa, ties, wb) in store.head_to_head().items():
        if "prediff" in b and "prediff" not in a:  # PreDiff first, as the study reports it
            a, b, wa, wb = b, a, wb, wa
        w = WinRate(a, wa + ties + wb, wa, ties, wb)
        pairs.append({"a": a, "b": b, "a_wins": wa, "ties": ties, "b_wins": wb, "a_win_rate": w.win_rate,
                      "interval_95": list(w.ci95)})
    return {"pairs": pairs, "choices": store.count()}


def preference_table(pref: dict) -> Table:
    rows = [[p["a"], p["b"], p["a_wins"], p["ties"], p["b_wins"], round(p["a_win_rate"], 3),
             f"[{p['interval_95'][0]:.2f}, {p['interval_95'][1]:.2f}]"] for p in pref["pairs"]]
    return Table("Human preference (blind pairwise ratings)",
                 ["A", "B", "A preferred", "ties", "B preferred", "A win rate", "95% interval (Wilson)"], rows,
                 note=f"{pref['choices']} choices from `dlmlab rate`; win rate = (wins + ties / 2) / comparisons.")
