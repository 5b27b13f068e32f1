"""dlmlab train CONFIG.yaml --out DIR"""

from __future__ import annotations

import argparse
import dataclasses

from dlmlab import outdir
from dlmlab.files import strict_json
from dlmlab.training.lm import load_run_config, run_training


EPILOG = """\
The config has four sections (any may be omitted; unknown fields are errors):
  objective: ar | mdlm (masked diffusion)      data: DataConfig
  model: family (transformer | mamba | mamba2 | lstm | gru; default transformer) and the fields
         of that family's config (TransformerConfig, MambaConfig, Mamba2Config, RecurrentConfig)
  train: TrainConfig (steps, batch_size = global batch, lr, schedule, ckpt_every ...)
  noise: mdlm noise schedule, {name: linear | loglinear | cosine, eps: ...} (default linear)
mdlm on a transformer needs model.attn_mask: bidirectional; mamba, mamba2, lstm and gru are causal
(under mdlm each position sees the tokens to its left and the mask pattern).

The run directory receives config.json, tokenizer.json, model.json (family, model config,
objective, mask id, noise), metrics.jsonl (one JSON row per logged step), eval.json, and
checkpoints/step_N/{model,optimizer}.safetensors + state.json + model.json + tokenizer.json.
Load the run, or any checkpoint folder, with dlmlab.load(DIR) in Python.
Re-running the same command resumes exactly from the latest checkpoint (also after kill -9).
--no-resume starts over: an earlier run's files are moved into DIR/previous-<time>/, not deleted.
One run at a time per DIR: a second command on a DIR in use stops with an error (DIR/.dlmlab.lock).

examples:
  dlmlab train configs/shakespeare_ar.yaml --out runs/ar
  dlmlab train configs/shakespeare_mdlm.yaml --out runs/mdlm --steps 50
  dlmlab train configs/shakespeare_mamba_ar.yaml --out runs/mamba
  torchrun --nproc_per_node 2 --standalone -m dlmlab.cli.main train configs/shakespeare_ar.yaml --out runs/ar2
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("config", help="YAML run config (see configs/)")
    p.add_argument("--out", required=True, metavar="DIR", help="run directory (resumed if it holds a checkpoint)")
    p.add_argument("--no-resume", action="store_true",
                   help="start over even if DIR holds a run (its files are moved to DIR/previous-<time>/)")
    p.add_argument("--steps", type=int, help="override train.steps")


def run(args: argparse.Namespace) -> int:
    cfg = load_run_config(args.config)
    if args.steps is not None:  # replace() checks the changed config again
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=args.steps))
    with outdir.locked(args.out, "dlmlab train"), outdir.write_errors(args.out):
        result = run_training(cfg, args.out, resume=not args.no_resume)
    from dlmlab.training.distributed import init_from_env

    if init_from_env().is_main:
        print(strict_json({"out": args.out, "eval": result["eval"]}))
    return 0
