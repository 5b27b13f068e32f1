"""dlmlab eval RUN_OR_FOLDER: held-out perplexity (AR) or ELBO perplexity bound (masked diffusion).

A ``dlmlab train`` run (or one of its checkpoints) is evaluated as its config says (data, seq_len, batch
size, eval batches).  Anything else :func:`dlmlab.load` loads, a Hugging Face folder (GPT-2, Llama, Qwen2,
GPT-NeoX, Mamba, LLaDA ...) or a ``train()`` run, is evaluated with its own tokenizer on ``--source``
(default tinyshakespeare): the last 10% of the text, in ``--batches`` batches of ``--batch-size`` windows
of ``--seq-len`` tokens.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dlmlab.data import DataConfig, load_corpus
from dlmlab.errors import UserError
from dlmlab.rundir.load import has_run_config, run_of
from dlmlab.training.lm import evaluate_lm
from dlmlab.training.run_config import read_run_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_OR_FOLDER",
                   help="a directory written by `dlmlab train` (or a checkpoint of it), or a Hugging Face model folder")
    p.add_argument("--source", help="evaluate on another text source (named corpus or file) instead")
    p.add_argument("--seq-len", type=int, help="tokens per window, not for `dlmlab train` runs "
                                               "(default: 128, or the model's max positions if fewer)")
    p.add_argument("--batch-size", type=int, default=8, help="windows per batch, not for `dlmlab train` runs (8)")
    p.add_argument("--batches", type=int, default=8, help="batches evaluated, not for `dlmlab train` runs (8)")
    p.add_argument("--step", type=int, metavar="N",
                   help="evaluate checkpoint N of the run folder (default: the latest; see the steps a run keeps "
                        "in RUN/checkpoints/)")


def _eval_loaded(args: argparse.Namespace) -> dict:
    from dlmlab import load

    for name in ("seq_len", "batch_size", "batches"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    p = Path(args.run_dir)
    if p.is_dir() and not any((p / f).exists() for f in ("config.json", "model.json", "checkpoints", "state.json")):
        raise UserError(f"{p} is not a dlmlab run directory or a Hugging Face model folder (no config.json, "
                        "model.json or checkpoints/); give a folder written by `dlmlab train` or a Hugging Face folder")
    run = load(p, step=args.step)
    if run.tokenizer is None:
        raise UserError(f"{args.run_dir} has no tokenizer, so the text cannot be encoded")
    if not callable(getattr(run.objective, "evaluate", None)):
        raise UserError(f"{args.run_dir} does not say its objective (e.g. ar or mdlm), so it cannot be evaluated")
    if run.shift_logits != run.objective.shift_logits:
        raise UserError(f"{args.run_dir} is a {run.objective.name} model with shifted logits (Dream); "
                        "`dlmlab eval` scores a model only as its objective predicts")
    cfg = getattr(run.model, "cfg", None)
    limit = cfg.max_seq_len if getattr(cfg, "positions", None) == "learned" else None
    seq_len = args.seq_len or (min(128, limit - 1) if limit is not None else 128)
    if limit is not None and seq_len + 1 > limit:
        raise UserError(f"--seq-len {seq_len} needs {seq_len + 1} positions; the model has {limit}")
    if seq_len < 2:
        raise UserError(f"--seq-len must be > 1, got {seq_len}")
    data = DataConfig(source=args.source or DataConfig.source, seq_len=seq_len)
    stream, _ = load_corpus(data, run.tokenizer)
    res = evaluate_lm(run.model, run.objective, stream, seq_len, args.batch_size, args.batches)
    return {**res, "source": data.source, "seq_len": seq_len, "format": run.format}


def run(args: argparse.Namespace) -> int:
    if not has_run_config(Path(args.run_dir)):
        print(json.dumps(_eval_loaded(args)))
        return 0
    path = Path(args.run_dir)
    if args.step is not None:
        from dlmlab.rundir.load import step_checkpoint

        if path.parent.name == "checkpoints":
            raise UserError(f"{path} is a checkpoint folder; --step picks a checkpoint of a run folder (give the run)")
        path = step_checkpoint(path, args.step)
    from dlmlab import load

    cfg = read_run_config(run_of(path))
    run = load(path)  # the model and the objective it was trained with (model.json)
    if run.tokenizer is None:
        raise UserError(f"{run_of(path) / 'tokenizer.json'} is missing, so the run's text cannot be encoded; copy "
                        "the tokenizer.json of the run back into the folder")
    if args.source:
        cfg.data.source = args.source
    stream, _ = load_corpus(cfg.data, run.tokenizer)
    print(json.dumps(evaluate_lm(run.model, run.objective, stream, cfg.data.seq_len, cfg.train.batch_size,
                                 cfg.eval_batches)))
    return 0
