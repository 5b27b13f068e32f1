"""`dlmlab train` / `dlmlab eval`: a transformer LM on a text corpus, AR or masked diffusion."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from dlmlab.config import ConfigError, from_dict, load_yaml, require
from dlmlab.data import DataConfig, TokenStream, load_corpus, load_tokenizer
from dlmlab.files import atomic_write_text
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives import ar_loss, mdlm_loss
from dlmlab.objectives.schedule import sample_t
from dlmlab.training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from dlmlab.training.config import TrainConfig
from dlmlab.training.distributed import init_from_env
from dlmlab.training.loop import train


@dataclass
class RunConfig:
    """A whole LM training run.  ``model.vocab_size`` is taken from the tokenizer (plus one mask id for mdlm)."""

    model: TransformerConfig = field(default_factory=TransformerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    objective: Literal["ar", "mdlm"] = "ar"
    eval_batches: int = 8

    def validate(self) -> None:
        require(self.eval_batches > 0, f"eval_batches must be > 0, got {self.eval_batches}")
        if self.objective == "mdlm" and self.model.attn_mask == "causal":
            raise ConfigError("objective 'mdlm' needs model.attn_mask 'bidirectional' (a causal mask cannot see right context)")


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


def run_training(cfg: RunConfig, out_dir: str | Path, resume: bool = True) -> dict:
    """Train per ``cfg`` into ``out_dir`` (config.json, tokenizer.json, metrics.jsonl, checkpoints/)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok_path = out / "tokenizer.json"
    cfg_path = out / "config.json"
    ctx = init_from_env()
    if cfg_path.exists() and resume:
        old = json.loads(cfg_path.read_text())
        if old != dataclasses.asdict(cfg):
            raise ConfigError(f"{out} holds a run with a different config; use another --out or --no-resume")
    # Under torchrun only rank 0 writes the tokenizer / config; the others wait and read them.
    if ctx.is_main:
        reuse = tok_path.exists() and resume
        stream, tokenizer = load_corpus(cfg.data, load_tokenizer(tok_path) if reuse else None)
        if not reuse:
            tmp = tok_path.with_name("tokenizer.json.tmp")
            tokenizer.save(tmp)
            os.replace(tmp, tok_path)
        atomic_write_text(cfg_path, json.dumps(dataclasses.asdict(cfg), indent=1))
    ctx.barrier()
    if not ctx.is_main:
        stream, tokenizer = load_corpus(cfg.data, load_tokenizer(tok_path))
    torch.manual_seed(cfg.train.seed)
    model = Transformer(_with_vocab(cfg, tokenizer.vocab_size))
    make_batch, loss_fn = make_lm_task(cfg, stream, tokenizer.vocab_size)
    eval_fn = lambda m, step: evaluate_lm(m, cfg, stream, tokenizer.vocab_size)  # noqa: E731
    history = train(model, cfg.train, make_batch, loss_fn, out_dir=out, eval_fn=eval_fn, resume=resume,
                    desc=f"train {cfg.objective}")
    final = evaluate_lm(model, cfg, stream, tokenizer.vocab_size)
    if ctx.is_main:
        atomic_write_text(out / "eval.json", json.dumps(final, indent=1))
    return {"history": history, "eval": final}


def load_run(out_dir: str | Path) -> tuple[Transformer, RunConfig, object]:
    """Model (latest checkpoint), config and tokenizer of a finished or partial run."""
    out = Path(out_dir)
    if not (out / "config.json").exists():
        raise CheckpointError(f"{out} is not a dlmlab run directory (no config.json)")
    cfg = from_dict(RunConfig, json.loads((out / "config.json").read_text()))
    tokenizer = load_tokenizer(out / "tokenizer.json")
    model = Transformer(_with_vocab(cfg, tokenizer.vocab_size))
    ck = latest_checkpoint(out)
    if ck is None:
        raise CheckpointError(f"no checkpoint in {out}/checkpoints")
    load_checkpoint(ck, model)
    return model, cfg, tokenizer
