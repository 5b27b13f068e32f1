"""`dlmlab train` / `dlmlab eval`: an LM of any family (transformer, mamba, mamba2, lstm, gru) on a text
corpus, with the run config's objective (ar, mdlm, or one added with register_objective)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from dlmlab import outdir
from dlmlab.config import ConfigError
from dlmlab.data import TokenStream, load_corpus, load_tokenizer
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.rundir.card import CARD_NAME
from dlmlab.rundir.checkpoint import CheckpointError, latest_checkpoint
from dlmlab.training.distributed import init_from_env
from dlmlab.training.loop import train
from dlmlab.training.run_config import (RunConfig, build_run_model, load_run, load_run_config,  # noqa: F401
                                        model_from_dict, model_to_dict, normalized_config, read_run_config,
                                        run_config_dict, run_objective)


def make_lm_task(cfg: RunConfig, stream: TokenStream, vocab: int):
    """(batches, objective) for :func:`~dlmlab.training.train`: ``batches(step, gen)`` draws the step's windows
    of the training stream (``objective.window(seq_len)`` tokens: one more for AR), the run's objective
    (:func:`run_objective`) draws the rest (global batch)."""
    B = cfg.train.batch_size
    obj = run_objective(cfg, vocab)
    W = obj.window(cfg.data.seq_len)

    def batches(step: int, gen: torch.Generator) -> torch.Tensor:
        return TokenStream.windows(stream.train, B, W, gen)

    return batches, obj


@torch.no_grad()
def evaluate_lm(model: torch.nn.Module, objective, stream: TokenStream, seq_len: int, batch_size: int,
                batches: int) -> dict:
    """Held-out perplexity (an exact-NLL objective: ``nll``, ``ppl``) or ELBO perplexity bound (a denoising
    one: ``nelbo``, ``ppl_bound``, under its noise schedule) of ``model`` under ``objective`` on the first
    ``batches * batch_size`` validation windows of ``seq_len + 1`` tokens (``objective.evaluate``)."""
    model.eval()
    x = TokenStream.chunks(stream.val, seq_len + 1, limit=batches * batch_size)
    return objective.evaluate(model, x, seq_len, batch_size)


def evaluate_run(model: torch.nn.Module, cfg: RunConfig, stream: TokenStream, vocab: int) -> dict:
    """:func:`evaluate_lm` as run ``cfg`` says (its objective for ``vocab`` tokenizer ids, seq_len, batch size,
    eval batches)."""
    return evaluate_lm(model, run_objective(cfg, vocab), stream, cfg.data.seq_len, cfg.train.batch_size,
                       cfg.eval_batches)


# What `dlmlab train` writes into its folder; --no-resume moves an earlier run's aside first.
RUN_FILES = ("checkpoints", "metrics.jsonl", "config.json", "tokenizer.json", CARD_NAME, "eval.json")
# Fields that do not change the result: they may differ when a run resumes.
_ANY_VALUE = {"train.progress"}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def config_differences(old: dict, new: dict) -> list[str]:
    """``["model.d_model: 32 in the folder, 64 now", ...]`` for the fields where two run configs differ.

    A config without ``model.family`` (written before families existed) is a transformer's; one whose
    objective is a bare name beside a ``noise`` section (written before the objective section was the
    objective's card) is read as that card (:func:`normalized_config`)."""
    a, b = _flat(normalized_config(old)), _flat(normalized_config(new))
    for d in (a, b):
        if any(k.startswith("model.") for k in d):
            d.setdefault("model.family", "transformer")
    missing = object()
    diffs = []
    for key in sorted(set(a) | set(b)):
        if key in _ANY_VALUE:
            continue
        x, y = a.get(key, missing), b.get(key, missing)
        if x != y:
            show = lambda v: "(absent)" if v is missing else json.dumps(v)  # noqa: E731
            diffs.append(f"{key}: {show(x)} in the folder, {show(y)} now")
    return diffs


def config_mismatch(out: Path, old: dict, cfg: "RunConfig", diffs: list[str]) -> str:
    """The one-line error for resuming ``out`` with another config: another family in one sentence, else the
    differing fields first, then their values."""
    family = (old.get("model") or {}).get("family", "transformer") if isinstance(old.get("model"), dict) else None
    hint = "use another --out, or --no-resume to start over (the earlier run is moved aside, not deleted)"
    if family is not None and family != cfg.family:
        return f"{out} holds a {family} run and this config trains a {cfg.family}; {hint}"
    fields = [d.split(":", 1)[0] for d in diffs]
    return (f"{out} holds a run with a different config, in {', '.join(fields)}; resume with the same config, "
            f"or {hint} ({'; '.join(diffs)})")


def run_training(cfg: RunConfig, out_dir: str | Path, resume: bool = True, extend: bool = False) -> dict:
    """Train per ``cfg`` into ``out_dir`` (config.json, tokenizer.json, model.json, metrics.jsonl, checkpoints/).

    ``model.json`` and ``tokenizer.json`` (also in every checkpoint folder) make the run, or any of its
    checkpoints, load with :func:`dlmlab.load`.

    Holds the folder's lock for the whole run.  ``resume``: continue from the folder's latest
    checkpoint (the config must be the same); else an earlier run's files are moved into
    ``out_dir/previous-<time>/`` and training starts from scratch.  A folder with no checkpoint
    (e.g. a run that failed before its first one) is simply started over.  ``extend``: the folder's config may
    differ in ``train.steps`` (the run is extended to ``cfg.train.steps``, ``dlmlab train --steps``).

    ``config.json`` is written once the resumed checkpoint has loaded, so a run that fails before (a damaged
    checkpoint) leaves the folder as it was.
    """
    out = Path(out_dir)
    with outdir.locked(out, "train"), outdir.write_errors(out):
        return _run_training(cfg, out, resume, extend)


def _run_training(cfg: RunConfig, out: Path, resume: bool, extend: bool = False) -> dict:
    tok_path = out / "tokenizer.json"
    cfg_path = out / "config.json"
    ctx = init_from_env()
    if not resume:
        if ctx.is_main:
            moved = outdir.move_aside(out, RUN_FILES)
            if moved is not None:
                print(f"--no-resume: moved the earlier run in {out} to {moved}", file=sys.stderr)
        ctx.barrier()
    # Resume only from a checkpoint; config / tokenizer files without one (a run that failed before its
    # first checkpoint) are stale and simply replaced.
    resuming = latest_checkpoint(out) is not None
    if resuming:
        if not cfg_path.exists() or not tok_path.exists():
            raise CheckpointError(f"{out} holds checkpoints but no {'config.json' if not cfg_path.exists() else 'tokenizer.json'}; "
                                  "use --no-resume to start over (the earlier files are moved aside) or another --out")
        try:
            old = json.loads(cfg_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{cfg_path} is corrupt ({e}); use --no-resume to start over "
                                  "(the earlier files are moved aside) or another --out") from None
        diffs = config_differences(old if isinstance(old, dict) else {}, run_config_dict(cfg))
        if extend:
            diffs = [d for d in diffs if not d.startswith("train.steps:")]
        if diffs:
            raise ConfigError(config_mismatch(out, old if isinstance(old, dict) else {}, cfg, diffs))
    # Under torchrun only rank 0 fits the tokenizer; the others wait and read it.
    if ctx.is_main:
        stream, tokenizer = load_corpus(cfg.data, load_tokenizer(tok_path) if resuming else None)

    def build_model() -> torch.nn.Module:
        torch.manual_seed(cfg.train.seed)
        return build_run_model(cfg, tokenizer.vocab_size)

    if ctx.is_main:
        model = build_model()  # a model the config cannot build fails here, before any file is written
        if not resuming:
            tokenizer.save(tok_path)
    ctx.barrier()
    if not ctx.is_main:
        stream, tokenizer = load_corpus(cfg.data, load_tokenizer(tok_path))
        model = build_model()
    batches, objective = make_lm_task(cfg, stream, tokenizer.vocab_size)
    eval_fn = lambda m, step: evaluate_run(m, cfg, stream, tokenizer.vocab_size)  # noqa: E731
    history = train(model, cfg.train, batches, objective, out_dir=out, eval_fn=eval_fn, resume=True,
                    desc=f"train {cfg.family} {objective.name}", tokenizer=tokenizer,
                    run_files={"config.json": strict_json(run_config_dict(cfg), indent=1)})
    final = evaluate_run(model, cfg, stream, tokenizer.vocab_size)
    if ctx.is_main:
        atomic_write_text(out / "eval.json", strict_json(final, indent=1))
    return {"history": history, "eval": final}


