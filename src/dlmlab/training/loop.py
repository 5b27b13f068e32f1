"""The training loop: AdamW, LR schedule, tqdm progress, JSONL metrics, exact resume, DDP.

One signature: ``train(model, cfg, batches, objective)``.  ``batches(step, gen)`` draws the step's clean data
(tokens [B, ...], or a dict of ``tokens`` and extra tensors such as ``labels``), the
:class:`~dlmlab.objectives.objective.Objective` turns it into the training batch (``make_batch(tokens, gen,
step=step, **extra)``: times, mask noise ...) and scores it (``loss``), and writes itself into the run's
``model.json`` (:mod:`dlmlab.rundir.card`).  Metrics stay tensors until a logged step converts them (no host
sync per step).

Determinism: batch ``step`` is drawn from a generator seeded with (seed, step),
so a resumed run sees exactly the batches (and diffusion noise) an uninterrupted
run would.  The batch holds *global* batch tensors (dim 0 = batch); with N processes each rank gets
its 1/N slice, so 2 processes reproduce 1 process with the same global batch.

Parallelism (``parallel``): ``"ddp"`` (the default) wraps the model in DistributedDataParallel when
there are several processes; ``"fsdp"`` trains a model already sharded by
:func:`dlmlab.training.fsdp.shard` (FSDP2; gradients averaged over the ranks by FSDP, the gradient norm
gathered over the shards).  One loop either way: same LR schedule, clipping, evaluation, checkpoints
and non-finite stop.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Mapping

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from dlmlab import outdir
from dlmlab.errors import UserError
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.progress import bar as progress_bar
from dlmlab.objectives.objective import Objective, step_batch
from dlmlab.rundir.card import CARD_NAME, TOKENIZER_NAME, card_text, is_family_model, model_card, write_card
from dlmlab.rundir.checkpoint import (latest_checkpoint, list_checkpoints, load_checkpoint, remove_stale,
                                     save_checkpoint)
from dlmlab.training.config import TrainConfig, lr_at
from dlmlab.training.distributed import DistContext, gathered, init_from_env, local_part

# What train() writes into its folder; with resume=False an earlier run's are moved aside first.
TRAIN_FILES = ("checkpoints", "metrics.jsonl", CARD_NAME, TOKENIZER_NAME)

Batch = dict[str, torch.Tensor]
Batches = Callable[[int, torch.Generator], "torch.Tensor | Batch"]
EvalFn = Callable[[torch.nn.Module, int], dict]
PARALLEL = ("ddp", "fsdp")


def step_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


# SSM parameters that the reference Mamba / Mamba-2 implementations keep out of weight decay
# (``_no_weight_decay``): the state decay rates, the skip connection and the step-size bias.
NO_DECAY_NAMES = frozenset({"A_log", "D", "dt_bias"})


class NonFiniteLoss(UserError):
    """The loss (or gradient norm) became NaN or infinite; the run stopped."""


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: not on biases, norms or other 1-D params, nor on the
    SSM parameters ``A_log``, ``D``, ``dt_bias`` (of any shape)."""
    decay, no_decay = [], []
    seen = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        plain = p.dim() >= 2 and name.rsplit(".", 1)[-1] not in NO_DECAY_NAMES
        (decay if plain else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def _read_metrics(path: Path, upto: int) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a kill
            if row.get("step", 0) <= upto:
                rows.append(row)
    return rows


def _stop_non_finite(steps: str, out: Path | None, what: str) -> NonFiniteLoss:
    where = ""
    if out is not None:
        cks = list_checkpoints(out)
        where = (f"; the last good checkpoint is {cks[-1][1]} (step {cks[-1][0]})" if cks
                 else "; no checkpoint was written")
    return NonFiniteLoss(f"training stopped at {steps}: the {what} became NaN or infinite{where}; "
                         f"lower train.lr, set train.grad_clip, or check the data")


def _all_finite(model: torch.nn.Module) -> bool:
    """Whether this rank's parameters (its shards, under FSDP) are all finite."""
    return all(bool(torch.isfinite(local_part(p)).all()) for p in model.parameters())


def train(
    model: torch.nn.Module,
    cfg: TrainConfig,
    batches: Batches,
    objective: Objective,
    out_dir: str | Path | None = None,
    eval_fn: EvalFn | None = None,
    resume: bool = True,
    extra_state: dict | None = None,
    desc: str = "train",
    ctx: DistContext | None = None,
    tokenizer=None,
    parallel: str = "ddp",
    run_files: Mapping[str, str] | None = None,
) -> list[dict]:
    """Train ``model`` in place for ``cfg.steps`` steps with ``objective``; returns the metric rows.

    Each step: ``data = batches(step, gen)`` (the step's clean data: tokens, or a dict of ``tokens`` and extra
    tensors), ``batch = objective.make_batch(tokens, gen, step=step, **extra)`` (both drawing from the step's
    generator), ``loss, metrics = objective.loss(model, batch)``.

    With ``out_dir`` metrics go to ``out_dir/metrics.jsonl`` and checkpoints to
    ``out_dir/checkpoints``; an existing checkpoint is resumed when ``resume``, else an earlier run's
    metrics and checkpoints are moved into ``out_dir/previous-<time>/`` first.  The folder is locked
    while training (:mod:`dlmlab.outdir`).  A loss or gradient norm that becomes NaN / inf stops the
    run with :class:`NonFiniteLoss` (checked at every logged step and before every checkpoint, so
    the newest checkpoint is the last good one).

    So that :func:`dlmlab.load` can load the folder or any checkpoint in it, ``model.json`` (family, model
    config and the objective as it writes itself, :mod:`dlmlab.rundir.card`) and the ``tokenizer``'s
    ``tokenizer.json`` are written into ``out_dir`` and into every checkpoint folder.  A model that is
    not a dlmlab family (no ``cfg``) trains all the same, without ``model.json``.

    ``parallel``: ``"ddp"`` or ``"fsdp"`` (a model already :func:`~dlmlab.training.fsdp.shard`-ed over
    ``ctx``'s ranks); see the module docstring.  ``eval_fn(model, step)`` runs (no grad, eval mode, on every
    rank) every ``cfg.eval_every`` steps and at the end; its dict joins that step's row with keys ``eval_*``.
    ``run_files``: more text files (name -> content, e.g. a run config) written into ``out_dir`` once the
    resumed checkpoint has loaded, so that a run failing on a damaged checkpoint changes nothing there.
    Checkpoint folders left half-written or half-deleted by a killed run are removed then too.
    """
    if parallel not in PARALLEL:
        raise UserError(f"parallel must be one of {list(PARALLEL)}, got {parallel!r}")
    if not callable(getattr(objective, "loss", None)) or not callable(getattr(objective, "make_batch", None)):
        raise UserError(f"train() needs an objective (make_batch and loss; dlmlab.objectives), got "
                        f"{type(objective).__name__}")
    ctx = ctx or init_from_env()
    if parallel == "fsdp" and out_dir is not None and ctx.world_size > 1:
        raise UserError("train(parallel='fsdp') over several processes keeps no checkpoints (the weights are "
                        "sharded); pass out_dir=None and gather the weights with dlmlab.training.fsdp.full_state_dict")
    card = model_card(model, objective) if out_dir is not None and is_family_model(model) else None
    out = Path(out_dir) if out_dir is not None else None
    with ExitStack() as stack:
        if out is not None:
            stack.enter_context(outdir.locked(out, "train"))  # rank 0 only; re-entrant in one process
            stack.enter_context(outdir.write_errors(out))
        tok_json = tokenizer.to_json() if tokenizer is not None else None
        return _train(model, cfg, batches, objective, out, eval_fn, resume, extra_state, desc, ctx, card, tok_json,
                      parallel, run_files)


def _train(model, cfg: TrainConfig, batches: Batches, objective: Objective, out: Path | None,
           eval_fn: EvalFn | None, resume: bool, extra_state: dict | None, desc: str,
           ctx: DistContext, card: dict | None = None, tok_json: str | None = None,
           parallel: str = "ddp", run_files: Mapping[str, str] | None = None) -> list[dict]:
    opt = make_optimizer(model, cfg)
    start = 0
    history: list[dict] = []
    metrics_path = out / "metrics.jsonl" if out else None
    if out is not None:
        if not resume and ctx.is_main:  # start from an empty folder: an earlier run is moved aside, not mixed in
            set_aside = outdir.move_aside(out, TRAIN_FILES)
            if set_aside is not None:
                print(f"starting over: moved the earlier run's files in {out} to {set_aside}", file=sys.stderr)
        ctx.barrier()
        ck = latest_checkpoint(out) if resume else None
        if ck is not None:
            state = load_checkpoint(ck, model, opt)
            start = int(state["step"])
            history = _read_metrics(metrics_path, start)
            if ctx.is_main:  # said once the checkpoint has loaded (a damaged one is the only line)
                print(f"resuming the run in {out} from step {start} of {cfg.steps} ({ck.name})", file=sys.stderr)
        if ctx.is_main:  # rewrite metrics so rows after the checkpoint (from a killed run) vanish
            remove_stale(out)
            for fname, text in (run_files or {}).items():
                atomic_write_text(out / fname, text)
            atomic_write_text(metrics_path, "".join(strict_json(r) + "\n" for r in history))
            if card is not None:
                write_card(out, card, tok_json)
    ck_files = {}
    if card is not None:
        ck_files[CARD_NAME] = card_text(card)
        if tok_json is not None:
            ck_files[TOKENIZER_NAME] = tok_json
    net = DDP(model) if ctx.world_size > 1 and parallel == "ddp" else model  # fsdp: sharded by the caller
    state_extra = {"train_config": asdict(cfg), **(extra_state or {})}

    def checkpoint(step: int) -> None:
        # never save weights that are already NaN / inf: the last good checkpoint must stay the newest
        if ctx.any(not _all_finite(model)):
            raise _stop_non_finite(f"step {step}", out, "weights")
        if out is not None and ctx.is_main:
            save_checkpoint(out, step, model, opt, state_extra, keep=cfg.keep_checkpoints, files=ck_files)
        ctx.barrier()

    bar = progress_bar(total=cfg.steps, initial=start, desc=desc, disable=not (cfg.progress and ctx.is_main),
               dynamic_ncols=True, leave=False)
    log = open(metrics_path, "a") if (metrics_path and ctx.is_main) else None
    try:
        model.train()
        bad = None  # device-side flag: a non-finite loss / grad norm since the last check (no sync per step)
        bad_step = 0
        for step in range(start + 1, cfg.steps + 1):
            lr = lr_at(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            gen = step_generator(cfg.seed, step)
            batch = {k: ctx.shard(v) for k, v in step_batch(objective, batches(step, gen), gen, step).items()}
            loss, metrics = objective.loss(net, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip) if cfg.grad_clip else None
            if gnorm is not None:
                gnorm = gathered(gnorm)  # FSDP: the norm over every rank's shards
            now_bad = ~torch.isfinite(loss.detach())
            if gnorm is not None:
                now_bad = now_bad | ~torch.isfinite(gnorm)
            if bad is None:
                bad, bad_step = now_bad, step
            else:
                bad = bad | now_bad
            opt.step()
            bar.update(1)
            evaluating = bool(eval_fn is not None and cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps))
            logged = step % cfg.log_every == 0 or step == cfg.steps or evaluating  # an evaluation gets its row
            saving = cfg.ckpt_every and step % cfg.ckpt_every == 0 and step != cfg.steps
            if logged or saving:
                if ctx.any(bool(bad)):
                    steps = f"step {step}" if bad_step == step else f"steps {bad_step}-{step}"
                    raise _stop_non_finite(steps, out, "loss or gradient norm")
                bad = None
            if logged:
                row = {"step": step, "lr": lr, **{k: ctx.mean(float(v)) for k, v in metrics.items()}}
                if gnorm is not None:
                    row["grad_norm"] = float(gnorm)
                if evaluating:
                    model.eval()
                    with torch.no_grad():
                        row.update({f"eval_{k}": v for k, v in eval_fn(model, step).items()})
                    model.train()
                history.append(row)
                bar.set_postfix(loss=f"{row.get('loss', float('nan')):.4f}")
                if log is not None:
                    log.write(strict_json(row) + "\n")
                    log.flush()
            if saving:
                checkpoint(step)
        if start < cfg.steps or (out is not None and latest_checkpoint(out) is None):
            checkpoint(cfg.steps)
    finally:
        bar.close()
        if log is not None:
            log.close()
    model.eval()
    return history
