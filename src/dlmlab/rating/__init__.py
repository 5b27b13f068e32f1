"""Blind pairwise preference rating of generated samples (``dlmlab rate DIR``).

``samples.py`` reads ``samples.jsonl`` (lines ``{"prompt", "method", "sample"}``) and forms the pairs;
``store.py`` keeps the choices in SQLite and computes win rates; ``server.py`` serves the local page
(``page.py``) on 127.0.0.1.
"""

from dlmlab.rating.samples import Pair, Sample, all_pairs, find_samples, load_samples
from dlmlab.rating.store import RatingStore, WinRate, format_win_rates

__all__ = ["Pair", "Sample", "all_pairs", "find_samples", "load_samples", "RatingStore", "WinRate",
           "format_win_rates"]
