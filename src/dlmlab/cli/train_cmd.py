"""dlmlab train CONFIG.yaml --out DIR"""

from __future__ import annotations

import argparse
import json

from dlmlab.training.lm import load_run_config, run_training


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="YAML run config (see configs/)")
    p.add_argument("--out", required=True, help="run directory (resumed if it holds a checkpoint)")
    p.add_argument("--no-resume", action="store_true", help="start over even if DIR holds a checkpoint")
    p.add_argument("--steps", type=int, help="override train.steps")


def run(args: argparse.Namespace) -> int:
    cfg = load_run_config(args.config)
    if args.steps is not None:
        cfg.train.steps = args.steps
        cfg.train.validate()
    result = run_training(cfg, args.out, resume=not args.no_resume)
    from dlmlab.training.distributed import init_from_env

    if init_from_env().is_main:
        print(json.dumps({"out": args.out, "eval": result["eval"]}))
    return 0
