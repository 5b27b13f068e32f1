"""`dlmlab train` / `dlmlab eval`: a transformer LM on a text corpus, AR or masked diffusion."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from dlmlab.config import Config, ConfigError, load_json, load_yaml, require
from dlmlab.data import DataConfig, TokenStream, load_corpus, load_tokenizer
from dlmlab import outdir
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives import ar_loss, mdlm_loss
from dlmlab.objectives.schedule import sample_t
from dlmlab.training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from dlmlab.training.config import TrainConfig
from dlmlab.training.distributed import init_from_env
from dlmlab.training.loop import train


@dataclass
class RunConfig(Config):
    """A whole LM training run.  ``model.vocab_size`` is taken from the tokenizer (plus one mask id for mdlm).
    Checked when built or loaded (also the sections together: the model must fit ``data.seq_len``)."""

    model: TransformerConfig = field(default_factory=TransformerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    objective: Literal["ar", "mdlm"] = "ar"
    eval_batches: int = 8

    def validate(self) -> None:
        require(self.eval_batches > 0, f"eval_batches must be > 0, got {self.eval_batches}")
        if self.objective == "mdlm" and self.model.attn_mask == "causal":
            raise ConfigError("objective 'mdlm' needs model.attn_mask 'bidirectional' (a causal mask cannot see right context)")
        if self.model.positions == "learned" and self.data.seq_len > self.model.max_seq_len:
            raise ConfigError(
                f"data.seq_len ({self.data.seq_len}) exceeds model.max_seq_len ({self.model.max_seq_len}) of learned "
                "positions; raise model.max_seq_len or lower data.seq_len")


def load_run_config(path: str | Path) -> RunConfig:
    return load_yaml(RunConfig, path)


def _with_vocab(cfg: RunConfig, data_vocab: int) -> TransformerConfig:
    extra = 1 if cfg.objective == "mdlm" else 0
    return dataclasses.replace(cfg.model, vocab_size=data_vocab + extra)


def make_lm_task(cfg: RunConfig, stream: TokenStream, vocab: int):
    """(make_batch, loss_fn) for the run's objective; noise is drawn in make_batch (global batch)."""
    T, B = cfg.data.seq_len, cfg.train.batch_size
    mask_id = vocab  # last id of the model vocabulary

    def make_batch(step: int, gen: torch.Generator) -> dict:
        x = TokenStream.windows(stream.train, B, T + (1 if cfg.objective == "ar" else 0), gen)
        if cfg.objective == "ar":
            return {"tokens": x}
        return {"tokens": x, "t": sample_t(B, gen), "noise": torch.rand(x.shape, generator=gen)}

    def loss_fn(model, batch):
        if cfg.objective == "ar":
            return ar_loss(model, batch["tokens"])
        return mdlm_loss(model, batch["tokens"], mask_id, t=batch["t"], noise=batch["noise"])

    return make_batch, loss_fn


@torch.no_grad()
def evaluate_lm(model: Transformer, cfg: RunConfig, stream: TokenStream, vocab: int) -> dict:
    """Held-out perplexity (AR) or ELBO perplexity bound (MDLM) on fixed validation windows."""
    model.eval()
    T = cfg.data.seq_len
    x = TokenStream.chunks(stream.val, T + 1, limit=cfg.eval_batches * cfg.train.batch_size)
    if cfg.objective == "ar":
        losses = [ar_loss(model, xb)[0].item() for xb in x.split(cfg.train.batch_size)]
        nll = sum(losses) / len(losses)
        return {"nll": nll, "ppl": math.exp(nll)}
    g = torch.Generator().manual_seed(1234)
    losses = [mdlm_loss(model, xb[:, :T], vocab, generator=g)[0].item() for xb in x.split(cfg.train.batch_size)]
    nll = sum(losses) / len(losses)
    return {"nelbo": nll, "ppl_bound": math.exp(nll)}


# What `dlmlab train` writes into its folder; --no-resume moves an earlier run's aside first.
RUN_FILES = ("checkpoints", "metrics.jsonl", "config.json", "tokenizer.json", "eval.json")
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
    """``["model.d_model: 32 in the folder, 64 now", ...]`` for the fields where two run configs differ."""
    a, b = _flat(old), _flat(new)
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


def run_training(cfg: RunConfig, out_dir: str | Path, resume: bool = True) -> dict:
    """Train per ``cfg`` into ``out_dir`` (config.json, tokenizer.json, metrics.jsonl, checkpoints/).

    Holds the folder's lock for the whole run.  ``resume``: continue from the folder's latest
    checkpoint (the config must be the same); else an earlier run's files are moved into
    ``out_dir/previous-<time>/`` and training starts from scratch.  A folder with no checkpoint
    (e.g. a run that failed before its first one) is simply started over.
    """
    out = Path(out_dir)
    with outdir.locked(out, "train"), outdir.write_errors(out):
        return _run_training(cfg, out, resume)


def _run_training(cfg: RunConfig, out: Path, resume: bool) -> dict:
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
        diffs = config_differences(old if isinstance(old, dict) else {}, dataclasses.asdict(cfg))
        if diffs:
            raise ConfigError(f"{out} holds a run with a different config ({'; '.join(diffs)}); resume with the "
                              f"same config, use another --out, or --no-resume to start over (the earlier run is moved aside)")
    # Under torchrun only rank 0 fits the tokenizer; the others wait and read it.
    if ctx.is_main:
        stream, tokenizer = load_corpus(cfg.data, load_tokenizer(tok_path) if resuming else None)

    def build_model() -> Transformer:
        torch.manual_seed(cfg.train.seed)
        return Transformer(_with_vocab(cfg, tokenizer.vocab_size))

    if ctx.is_main:
        model = build_model()  # a model the config cannot build fails here, before any file is written
        if not resuming:
            tmp = tok_path.with_name(f"tokenizer.json.{os.getpid()}.tmp")
            tokenizer.save(tmp)
            os.replace(tmp, tok_path)
        atomic_write_text(cfg_path, strict_json(dataclasses.asdict(cfg), indent=1))
    ctx.barrier()
    if not ctx.is_main:
        stream, tokenizer = load_corpus(cfg.data, load_tokenizer(tok_path))
        model = build_model()
    make_batch, loss_fn = make_lm_task(cfg, stream, tokenizer.vocab_size)
    eval_fn = lambda m, step: evaluate_lm(m, cfg, stream, tokenizer.vocab_size)  # noqa: E731
    history = train(model, cfg.train, make_batch, loss_fn, out_dir=out, eval_fn=eval_fn, resume=True,
                    desc=f"train {cfg.objective}")
    final = evaluate_lm(model, cfg, stream, tokenizer.vocab_size)
    if ctx.is_main:
        atomic_write_text(out / "eval.json", strict_json(final, indent=1))
    return {"history": history, "eval": final}


def load_run(out_dir: str | Path) -> tuple[Transformer, RunConfig, object]:
    """Model (latest checkpoint), config and tokenizer of a finished or partial run."""
    out = Path(out_dir)
    if not (out / "config.json").exists():
        raise CheckpointError(f"{out} is not a dlmlab run directory (no config.json)")
    cfg = load_json(RunConfig, out / "config.json", hint="the run directory is damaged: train it again")
    tokenizer = load_tokenizer(out / "tokenizer.json")
    model = Transformer(_with_vocab(cfg, tokenizer.vocab_size))
    ck = latest_checkpoint(out)
    if ck is None:
        raise CheckpointError(f"no checkpoint in {out}/checkpoints")
    load_checkpoint(ck, model)
    return model, cfg, tokenizer
