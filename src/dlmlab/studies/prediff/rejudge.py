"""Re-judge a stored PreDiff run with the current claim definitions, from its results.json measurements.

    python -m dlmlab.studies.prediff.rejudge RUN_DIR

A run written by older code keeps what the claims need (per-window held-out NLLs, the held-out curves, the
speed rounds), so its claims can be recomputed without training: the threshold and the paired comparisons
are rebuilt from them, the context-free (unigram) level from the run's own tokenizer (``backbone/``) and
corpus.  Prints each claim's stored verdict beside the one the current definitions give.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from dlmlab.data import TokenStream, load_tokenizer, resolve_text
from dlmlab.report.claims import Claim, judgement_of
from dlmlab.studies.prediff.adapt import unigram_nll
from dlmlab.studies.prediff.claims import compute_claims
from dlmlab.studies.prediff.presets import PRESETS
from dlmlab.studies.prediff.run import _comparisons
from dlmlab.studies.prediff.threshold import steps_to_reach


def remeasure(d: dict, unigram: float | None) -> dict:
    """A stored results.json ``d`` -> its ``results`` with budget, unigram level, threshold and comparisons
    recomputed by the current code (the stored per-window NLLs and curves are the inputs)."""
    res = json.loads(json.dumps(d["results"]))
    res["budget"] = int(d["config"]["adapt"]["steps"])
    if unigram is not None:
        res.setdefault("data", {})["unigram_nll"] = unigram
    res["threshold"] = steps_to_reach(res["methods"], res["budget"])
    res["comparisons"] = _comparisons(res, None)
    return res


def stored_unigram(run: Path, d: dict) -> float | None:
    """The unigram level of a run pretrained here, from its tokenizer and its preset's corpus (None if absent)."""
    tok_path = run / "backbone" / "tokenizer.json"
    p = PRESETS.get(d.get("preset", ""))
    if p is None or not tok_path.exists():
        return None
    tok = load_tokenizer(tok_path)
    text = resolve_text(p.resolved(p.corpus)).read_text(encoding="utf-8")
    stream = TokenStream(torch.tensor(tok.encode(text), dtype=torch.long), p.val_fraction)
    eval_x = TokenStream.chunks(stream.val, p.seq_len, limit=p.eval_windows)
    return unigram_nll(stream.train, eval_x, p.prompt_len, tok.vocab_size)


def rejudge(run: Path) -> list[tuple[str, str, Claim]]:
    """[(claim id, stored verdict label, current Claim)] of the run in ``run``."""
    d = json.loads((Path(run) / "results.json").read_text())
    old = {c["id"]: judgement_of(c).label() for c in d.get("claims", [])}
    return [(c.id, old.get(c.id, "-"), c) for c in compute_claims(remeasure(d, stored_unigram(Path(run), d)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a prediff output directory (with results.json)")
    args = ap.parse_args(argv)
    for cid, before, c in rejudge(args.run):
        print(f"{cid}: stored {before} -> now {c.judgement.label()}" + (f"  [{c.detail}]" if c.detail else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
