"""dlmlab eval DIR"""

from __future__ import annotations

import argparse
import json

from dlmlab.data import load_corpus
from dlmlab.training.lm import evaluate_lm, load_run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a directory written by `dlmlab train`")
    p.add_argument("--source", help="evaluate on another text source (named corpus or file) instead")


def run(args: argparse.Namespace) -> int:
    model, cfg, tok = load_run(args.run_dir)
    if args.source:
        cfg.data.source = args.source
    stream, _ = load_corpus(cfg.data, tok)
    print(json.dumps(evaluate_lm(model, cfg, stream, tok.vocab_size)))
    return 0
