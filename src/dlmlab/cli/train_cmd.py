"""dlmlab train CONFIG.yaml --out DIR"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from dlmlab import outdir
from dlmlab.errors import UserError
from dlmlab.files import strict_json
from dlmlab.rundir.checkpoint import latest_checkpoint
from dlmlab.training.distributed import init_from_env, is_main_process
from dlmlab.training.lm import RunConfig, config_differences, load_run_config, run_config_dict, run_training


EPILOG = """\
The config has four sections (any may be omitted; unknown fields are errors):
  objective: ar | mdlm (masked diffusion), or the objective's card, e.g.
             {name: mdlm, noise: {name: loglinear, eps: 1.0e-3}, t_range: [0.02, 0.5], pad_id: null}
             (noise: linear | loglinear | cosine; default linear)
  data: DataConfig
  model: family (transformer | mamba | mamba2 | lstm | gru; default transformer) and the fields
         of that family's config (TransformerConfig, MambaConfig, Mamba2Config, RecurrentConfig)
  train: TrainConfig (steps, batch_size = global batch, lr, schedule, ckpt_every ...)
mdlm on a transformer needs model.attn_mask: bidirectional; mamba, mamba2, lstm and gru are causal
(under mdlm each position sees the tokens to its left and the mask pattern).

The run directory receives config.json, tokenizer.json, model.json (family, model config,
objective, mask id, noise), metrics.jsonl (one JSON row per logged step), eval.json, and
checkpoints/step_N/{model,optimizer}.safetensors + state.json + model.json + tokenizer.json.
Load the run, or any checkpoint folder, with dlmlab.load(DIR) in Python.
Re-running the same command resumes exactly from the latest checkpoint (also after kill -9).
A run extends with --steps M (M total steps, more than it has trained): it resumes from its latest
checkpoint and trains on to step M (the learning-rate schedule then spans M steps, so with a decaying
train.schedule the steps after the old end are not those of a fresh M-step run).  Pruning of old
checkpoints (train.keep_checkpoints) prints one line naming the kept and the removed ones.
--no-resume starts over: an earlier run's files are moved into DIR/previous-<time>/, not deleted.
One run at a time per DIR: a second command on a DIR in use stops with an error (DIR/.dlmlab.lock).

examples:
  dlmlab train configs/shakespeare_ar.yaml --out runs/ar
  dlmlab train configs/shakespeare_mdlm.yaml --out runs/mdlm --steps 50
  dlmlab train configs/shakespeare_mamba_ar.yaml --out runs/mamba
  dlmlab train configs/shakespeare_ar.yaml --out runs/ar --steps 2000   # extend a finished run to 2000 steps
  torchrun --nproc_per_node 2 --standalone -m dlmlab.cli.main train configs/shakespeare_ar.yaml --out runs/ar2
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("config", help="YAML run config (see configs/)")
    p.add_argument("--out", required=True, metavar="DIR", help="run directory (resumed if it holds a checkpoint)")
    p.add_argument("--no-resume", action="store_true",
                   help="start over even if DIR holds a run (its files are moved to DIR/previous-<time>/)")
    p.add_argument("--steps", type=int, metavar="M",
                   help="override train.steps (total steps); on a run folder, extends the run to M steps")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (train.progress: false)")


def extend_run(out: Path, cfg: RunConfig) -> bool:
    """Whether run folder ``out`` is to be extended (or, unfinished, given a new end) to ``cfg.train.steps``:
    it holds a checkpoint and its ``config.json`` differs from ``cfg`` in ``train.steps`` alone.

    A total below the steps already trained is a one-line error.  Nothing is written here:
    :func:`~dlmlab.training.lm.run_training` (``extend=True``) writes the new step count into ``config.json``
    once the latest checkpoint has loaded, so an extension that fails leaves the folder as it was.  False
    when there is nothing to extend (no run there, the same steps, or other differences, which
    ``run_training`` reports).
    """
    cfg_path = out / "config.json"
    ck = latest_checkpoint(out) if (out / "checkpoints").is_dir() else None
    if ck is None or not cfg_path.is_file():
        return False
    try:
        old = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False  # run_training says what is wrong with it
    new = run_config_dict(cfg)
    diffs = config_differences(old if isinstance(old, dict) else {}, new)
    if not diffs or any(not d.startswith("train.steps:") for d in diffs):
        return False
    trained = int(json.loads((ck / "state.json").read_text()).get("step", 0))
    total = cfg.train.steps
    if total < trained:
        raise UserError(f"{out} has trained {trained} steps (its latest checkpoint); --steps {total} is fewer: "
                        f"give --steps above {trained} to extend it, or --no-resume to start over")
    if is_main_process():
        print(f"extending the run in {out}: from its checkpoint at step {trained} to {total} steps "
              f"(train.steps was {old.get('train', {}).get('steps')})", file=sys.stderr)
    return True


def run(args: argparse.Namespace) -> int:
    cfg = load_run_config(args.config)
    from dlmlab.cli.train_model import as_factory_builds  # the model build_model makes of the section

    cfg = as_factory_builds(cfg, args.config, args.out, resume=not args.no_resume)
    if args.steps is not None:  # replace() checks the changed config again
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=args.steps))
    if args.no_progress:  # train.progress may differ on resume (it does not change the result)
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, progress=False))
    with outdir.locked(args.out, "dlmlab train"), outdir.write_errors(args.out):
        # (a config file with other steps stays an error)
        extend = args.steps is not None and not args.no_resume and extend_run(Path(args.out), cfg)
        result = run_training(cfg, args.out, resume=not args.no_resume, extend=extend)
    if init_from_env().is_main:
        print(strict_json({"out": args.out, "eval": result["eval"]}))
    return 0
