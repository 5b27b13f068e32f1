"""Forward-only fine-tuning of a local checkpoint on relation facts, reverse evaluation and the study's
three signatures along training: the large-scale part of the reversal study (LLaDA, Dream; LLaMA / Qwen
as autoregressive baselines).

The checkpoint folder (config.json + safetensors + tokenizer, nothing downloaded, no remote code run) is
loaded into the toolkit's hooked :class:`~dlmlab.models.Transformer` by ``dlmlab.models.hf_auto.load_hf``
(LLaDA, Dream, Llama, Qwen2, ...), which also says the model's objective (``mdm`` / ``ar``), mask id and
whether logits are shifted (Dream: position i-1 predicts token i).  :class:`AlignedLM` prepends the BOS
token and aligns the logits, so every loss and analysis sees "position i scores token i" (MDM) or
"position i predicts token i+1" (ARM).

* ``objective: auto`` follows the checkpoint; ``mdm`` fine-tunes with the MDLM loss and bidirectional
  attention, ``ar`` with per-sequence next-token NLL and causal attention.
* Data: ``person_description`` (forward-only training on ``p2d_prompts_train``; forward accuracy on the
  held-out templates, reverse = description -> name) or ``celebrity`` (Parent-Child: "C's mother is P",
  reverse "P's child is" -> C), both from ``../shared/data/reversal_curse``; accuracy ranks the true
  completion among the ``n_facts`` candidates (see :mod:`dlmlab.studies.reversal.real`).
* Signatures (:mod:`dlmlab.studies.reversal.hf_signatures`) at step 0 and every ``eval_every`` steps:
  forward/reverse attention-score correlation (MDM), per-fact cosine of forward- and reverse-loss
  gradients on the storage weights W_v, W_o, and the reverse (and forward) probability and ranking
  accuracy of the true completion; each with its control (other facts paired, other candidates).
* ``lora``: peft LoRA adapters on the attention / MLP linear layers, only they train
  (:mod:`dlmlab.training.lora`); the adapters are saved to ``adapters.safetensors``.
* Under ``torchrun`` the model is sharded with FSDP (:mod:`dlmlab.training.fsdp`; nccl on GPU, gloo on
  CPU); ``train.batch_size`` is the global batch; rank 0 writes.

Writes ``OUT/results.json`` (accuracies, signatures over training, history, config) and
``OUT/metrics.jsonl``.  Usage::

    python -m dlmlab.studies.reversal.hf_finetune --model /ckpt/LLaDA-8B-Base --out runs/llada_p2d \\
        --steps 500 --lr 1e-4 --lora [--config finetune.yaml]
    torchrun --nproc_per_node 8 -m dlmlab.studies.reversal.hf_finetune --model ... --out ... --dtype bfloat16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn

from dlmlab import outdir
from dlmlab.config import Config, ConfigError, load_yaml, require
from dlmlab.errors import UserError
from dlmlab.models.precision import upcast
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.objectives import ARObjective, MaskedDiffusionObjective
from dlmlab.studies.reversal import hf_signatures as sig
from dlmlab.studies.reversal.presets import RealDataPreset
from dlmlab.studies.reversal.real import (N_TEST_PER_FACT, N_TRAIN_PER_FACT, accuracy, candidate_loglik,
                                          celebrity_items, distinct_argmax, prepare)
from dlmlab.tasks.relations import ParentChild, load_person_description
from dlmlab.training import TrainConfig, train
from dlmlab.training.distributed import init_from_env
from dlmlab.training.fsdp import full_parameters, shard
from dlmlab.training.lora import LoraSettings, add_lora, is_adapter


@dataclass
class HFFinetuneConfig(Config):
    """One fine-tuning run (YAML: ``--config``; CLI flags override).  ``-1`` ids mean "from the checkpoint"."""

    model_path: str = ""
    objective: Literal["auto", "ar", "mdm"] = "auto"
    mask_token_id: int = -1
    bos_token_id: int = -1  # -1: the tokenizer's BOS (for Dream-style shifted logits: else its pad / eos)
    dataset: Literal["person_description", "celebrity"] = "person_description"
    n_facts: int = 30
    seq_len: int = 96
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "auto"  # auto | cpu | cuda | cuda:N (under torchrun: the rank's GPU)
    seed: int = 0
    eval_every: int = 0  # signatures every k steps (0: at the start and the end only)
    n_signature_facts: int = 8  # facts the gradient / attention signatures use (>= 3 for a correlation)
    eval_chunk: int = 64  # sequences per forward pass when ranking candidates
    lora: LoraSettings | None = None  # None: full fine-tuning
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=500, batch_size=16, lr=1e-5, warmup_steps=20,
                                                                   weight_decay=0.0, log_every=10))

    def validate(self) -> None:
        require(bool(self.model_path), "model_path must point at a local checkpoint directory")
        top = 30 if self.dataset == "person_description" else 1000
        require(1 < self.n_facts <= top, f"n_facts must be in [2, {top}] for {self.dataset}, got {self.n_facts}")
        require(self.seq_len >= 8, f"seq_len must be >= 8, got {self.seq_len}")
        require(self.eval_every >= 0, f"eval_every must be >= 0, got {self.eval_every}")
        require(3 <= self.n_signature_facts <= self.n_facts,
                f"n_signature_facts must be in [3, n_facts={self.n_facts}], got {self.n_signature_facts}")
        require(self.eval_chunk > 0, f"eval_chunk must be > 0, got {self.eval_chunk}")
        require(re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device) is not None,
                f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")


@dataclass
class LoadedInfo:
    """What the loader says about a checkpoint (see ``dlmlab.models.hf_auto``)."""

    format: str
    objective: str  # "ar" | "mdm"
    mask_id: int | None
    shift_logits: bool
    tokenizer_path: str
    bidirectional: bool


class AlignedLM(nn.Module):
    """tokens [B,T] -> logits [B,T,V] (float32 or wider) aligned like a toolkit model, around the loaded ``inner``
    Transformer.

    ``bos``: prepended to every sequence (``offset`` = 1); its logits are dropped.  ``shift`` (Dream): the
    inner model's logits at i predict token i+1, so with the BOS in front, position i of the input is scored
    by the inner position i; without a BOS position 0 repeats position 0's logits.
    """

    def __init__(self, inner: nn.Module, bos: int | None, shift: bool) -> None:
        super().__init__()
        self.inner, self.bos, self.shift = inner, bos, shift
        self.offset = 0 if bos is None else 1

    def inner_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.bos is None:
            return tokens
        return torch.cat([torch.full_like(tokens[:, :1], self.bos), tokens], 1)

    def forward(self, tokens: torch.Tensor, **kwargs) -> torch.Tensor:
        logits = upcast(self.inner(self.inner_tokens(tokens), **kwargs))  # bf16 / fp16 -> fp32 for the losses
        if self.bos is None:
            return torch.cat([logits[:, :1], logits[:, :-1]], 1) if self.shift else logits
        return logits[:, :-1] if self.shift else logits[:, 1:]


class _Encoder:
    """``encode(text) -> ids`` without special tokens, for the ranking code."""

    def __init__(self, tok) -> None:
        self.tok = tok
        self.vocab_size = len(tok)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)


def _device(name: str) -> torch.device:
    """The device of this process; under torchrun with GPUs, the rank's own GPU (``LOCAL_RANK``), made current
    before the process group starts so that nccl sees one GPU per rank."""
    local = os.environ.get("LOCAL_RANK")
    if name in ("auto", "cuda") and torch.cuda.is_available():
        if local is not None:
            torch.cuda.set_device(int(local))
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu" if name == "auto" else name)


def load_model(path: str | Path, dtype: torch.dtype = torch.float32):
    """(toolkit Transformer, :class:`LoadedInfo`) from a local folder through :func:`dlmlab.models.hf_auto.load_hf`
    (LLaDA, Dream, Llama, Mistral, Qwen2, GPT-2); other families have no attention to analyse."""
    from dlmlab.models.hf_auto import load_hf

    p = Path(path)
    if not p.is_dir():
        raise UserError(f"no local checkpoint directory at {p}")
    model, info = load_hf(p, dtype=dtype)
    blocks = getattr(model, "blocks", None)
    if not blocks or not hasattr(getattr(blocks[0], "attn", None), "W_v"):
        raise UserError(f"{p}: a {info.format} model is not the toolkit Transformer; the reversal fine-tuning "
                        "needs LLaDA, Dream, Llama, Mistral, Qwen2 or GPT-2 weights")
    if info.tokenizer_path is None:
        raise UserError(f"{p} holds no tokenizer files (tokenizer.json / tokenizer_config.json); copy the "
                        "checkpoint's tokenizer into the folder")
    return model, LoadedInfo(info.format, info.objective, info.mask_id, info.shift_logits, info.tokenizer_path,
                             info.bidirectional)


def load_tokenizer(path: str | Path):
    """The folder's tokenizer: ``AutoTokenizer`` (local files, no remote code); when its class is remote code
    (Dream's), the folder's ``tokenizer.json`` with the special tokens named in ``tokenizer_config.json``."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    path = Path(path)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # config.json of LLaDA / Dream is not a transformers model type: say nothing
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except (ValueError, OSError, KeyError):
        if not (path / "tokenizer.json").exists():
            raise UserError(f"{path}: no tokenizer that loads without remote code (need tokenizer.json or a "
                            "standard tokenizer config)") from None
        specials = {}
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            if (path / name).exists():
                for k, v in json.loads((path / name).read_text()).items():
                    v = v.get("content") if isinstance(v, dict) else v
                    if k in ("bos_token", "eos_token", "pad_token", "mask_token", "unk_token") and isinstance(v, str):
                        specials[k] = v
        return PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"), **specials)
    finally:
        hf_logging.set_verbosity(level)


def signature_docs(cfg: HFFinetuneConfig, tok, pad: int):
    """(forward, reverse) :class:`~hf_signatures.SpanDocs` for the first ``n_signature_facts`` facts."""
    n = cfg.n_signature_facts
    if cfg.dataset == "celebrity":
        facts, _, _ = celebrity_items(cfg.n_facts)  # prompts "C's <mother|father> is", completions " P"
        pairs = []
        for prompt, comp in zip(facts.prompts[:n], facts.completions[:n]):
            child, rel = prompt.removesuffix(" is").rsplit("'s ", 1)
            pairs.append(ParentChild(child, comp[1:], rel))
        fwd, rev = sig.celebrity_pieces(pairs)
    else:
        fwd, rev = sig.person_pieces(load_person_description("p2d_prompts_train"),
                                     load_person_description("p2d_reverse_prompts_test"), n,
                                     N_TRAIN_PER_FACT, N_TEST_PER_FACT)
    return sig.encode_pieces(tok, fwd, pad), sig.encode_pieces(tok, rev, pad)


def ranking(lm, task, kind, items, cfg: HFFinetuneConfig) -> dict:
    """Score every candidate of every item: accuracy (summed and per-token log-likelihood), distinct winners,
    ``p``: mean per-token probability exp(mean log p) of the true completion, ``p_control``: the same for the
    other candidates (the completions of the other facts: what rises for every fact, e.g. name frequency)."""
    s, n = candidate_loglik(lm, task, kind, items, cfg.seq_len, cfg.eval_chunk)
    per_token = s / np.maximum(n, 1)
    p = np.exp(per_token)
    truth = np.array([it[2] for it in items])
    true = np.zeros_like(p, dtype=bool)
    true[np.arange(len(items)), truth] = True
    return {"acc": accuracy(s, items), "acc_per_token": accuracy(per_token, items),
            "distinct_argmax": distinct_argmax(s), "p": float(p[true].mean()), "p_control": float(p[~true].mean())}


def signatures(lm, task, kind, objective, mask_id, docs, cfg: HFFinetuneConfig) -> dict:
    """The three signatures now: reverse (and forward) probability of the true completion with accuracy and the
    other candidates' probability as control (:func:`ranking`), gradient cosine (and control), attention
    correlation (MDM; and control)."""
    fwd, rev = docs
    g = sig.storage_gradient_cosines(lm, fwd, rev, objective, mask_id)
    out = {f"{name}_{k}": v for name, items in (("reverse", task.reverse_test), ("forward", task.forward_test))
           for k, v in ranking(lm, task, kind, items, cfg).items()}
    out |= {"grad_cosine": float(g["per_fact"].mean()), "grad_cosine_control": float(g["control_per_fact"].mean()),
            "grad_cosine_per_fact": g["per_fact"].tolist()}
    if objective == "mdm":
        a = sig.attention_correlations(lm, fwd, rev, mask_id)
        fin = lambda xs: [x for x in xs if x == x]  # noqa: E731
        out |= {"attn_corr": float(np.mean(fin(a["pooled_per_layer"]))) if fin(a["pooled_per_layer"]) else None,
                "attn_corr_control": (float(np.mean(fin(a["control_per_layer"])))
                                      if fin(a["control_per_layer"]) else None),
                "attn_corr_per_layer": a["pooled_per_layer"],
                "attn_corr_per_head_mean_per_layer": a["per_head_mean_per_layer"]}
    else:
        out["attn_corr"] = None  # causal: A cannot attend to B in the forward document
    return out


def finetune(cfg: HFFinetuneConfig, out: str | Path | None = None, progress: bool = True) -> dict:
    """Fine-tune forward-only, record the signatures along training, rank forward / reverse completions.
    Returns the results dict; with ``out`` (rank 0) writes ``results.json``, ``metrics.jsonl`` and, with LoRA,
    ``adapters.safetensors``."""
    cfg.check()
    dev = _device(cfg.device)
    ctx = init_from_env()
    dtype = getattr(torch, cfg.dtype)
    model, info = load_model(cfg.model_path, dtype)
    tok = load_tokenizer(info.tokenizer_path)
    objective = info.objective if cfg.objective == "auto" else cfg.objective
    mask_id = cfg.mask_token_id if cfg.mask_token_id >= 0 else (
        info.mask_id if info.mask_id is not None else (tok.mask_token_id if tok.mask_token_id is not None else -1))
    vocab = model.cfg.vocab_size
    if objective == "mdm" and mask_id < 0:
        raise ConfigError("objective 'mdm' needs a mask token: neither the checkpoint nor the tokenizer has one, "
                          "set mask_token_id")
    if mask_id >= vocab:
        raise ConfigError(f"mask_token_id {mask_id} is outside the model's vocabulary of {vocab}")
    pad = next((t for t in (tok.pad_token_id, tok.eos_token_id) if t is not None), None)
    if pad is None:
        raise ConfigError("the tokenizer has neither a pad nor an eos token to pad with")
    bos = cfg.bos_token_id if cfg.bos_token_id >= 0 else tok.bos_token_id
    if bos is None and info.shift_logits:
        bos = pad  # a shifted model needs a position in front of the first token
    model.cfg = dataclasses.replace(model.cfg, attn_mask="bidirectional" if objective == "mdm" else "causal")
    torch.manual_seed(cfg.seed)  # the adapters' random A matrices: the same on every rank and every run
    if cfg.lora is not None:
        add_lora(model, cfg.lora)
    model = model.to(dev)
    kind = "mdm" if objective == "mdm" else "arm"
    try:
        task = prepare(RealDataPreset(enabled=True, dataset=cfg.dataset, n_facts=cfg.n_facts, seq_len=cfg.seq_len),
                       tokenizer=_Encoder(tok), pad_id=pad, mask_id=max(mask_id, 0))
    except ValueError as e:  # a fact longer than seq_len under this tokenizer
        raise ConfigError(f"{e}; raise seq_len") from None
    docs = signature_docs(cfg, _Encoder(tok), pad)
    shard(model, ctx)
    lm = AlignedLM(model, bos, info.shift_logits)

    B = cfg.train.batch_size

    # ARM: per-row mean next-token NLL of the padded documents (every row weighs the same, so a batch split over
    # ranks averages to the whole batch's loss); MDM: MDLM with pads never masked
    obj = (ARObjective(pad_id=pad, per_row=True, float32=True) if kind == "arm"
           else MaskedDiffusionObjective(mask_id, pad_id=pad))

    def batches(step, gen):
        return task.train[torch.randint(0, len(task.train), (B,), generator=gen)]

    def eval_fn(m, step):
        return {"signatures": {"step": step, **signatures(lm, task, kind, objective, mask_id, docs, cfg)}}

    trace = [eval_fn(lm, 0)["signatures"]]
    every = cfg.eval_every or cfg.train.steps
    tcfg = dataclasses.replace(cfg.train, seed=cfg.seed, progress=progress, eval_every=every, ckpt_every=0)
    history = train(lm, tcfg, batches, obj, eval_fn=eval_fn, desc=f"{info.format} {objective}", ctx=ctx,
                    parallel="fsdp")
    for row in history:
        if "eval_signatures" in row:
            trace.append(row.pop("eval_signatures"))
    res = {"model_path": str(cfg.model_path), "format": info.format, "objective": objective, "mask_id": mask_id,
           "bos_id": bos, "shift_logits": info.shift_logits, "lora": cfg.lora is not None,
           "world_size": ctx.world_size, "chance": 1.0 / cfg.n_facts,
           "final_loss": history[-1]["loss"] if history else None}
    last = trace[-1]  # evaluated after the last step
    assert last["step"] == cfg.train.steps
    for name in ("forward", "reverse"):
        for k in ("acc", "acc_per_token", "distinct_argmax", "p", "p_control"):
            res[f"{name}_{k}"] = last[f"{name}_{k}"]
    res["signatures"] = trace
    res["history"] = history
    res["n_trainable_params"] = sum(p.numel() for p in lm.parameters() if p.requires_grad)
    res["config"] = dataclasses.asdict(cfg)
    adapters = full_parameters(model, is_adapter) if cfg.lora is not None else None  # every rank takes part
    if out is not None and ctx.is_main:
        _write(Path(out), res, adapters)
    ctx.barrier()
    return res


def _write(out: Path, res: dict, adapters: dict | None) -> None:
    with outdir.locked(out, "hf_finetune"), outdir.write_errors(out):
        atomic_write_text(out / "metrics.jsonl", "".join(strict_json(r) + "\n" for r in res["history"]))
        atomic_write_text(out / "results.json", strict_json(res, indent=1))
        if adapters:
            from safetensors.torch import save_file

            save_file({k: v.contiguous() for k, v in adapters.items()}, str(out / "adapters.safetensors"))


def build_config(a: argparse.Namespace) -> HFFinetuneConfig:
    """The YAML config (if any) with the command-line flags that were given on top."""
    cfg = load_yaml(HFFinetuneConfig, a.config) if a.config else None
    base = dataclasses.asdict(cfg) if cfg else {"model_path": a.model or ""}
    top = {"model_path": a.model, "objective": a.objective, "mask_token_id": a.mask_token_id,
           "bos_token_id": a.bos_token_id, "dataset": a.dataset, "n_facts": a.n_facts, "seq_len": a.seq_len,
           "dtype": a.dtype, "device": a.device, "seed": a.seed, "eval_every": a.eval_every,
           "n_signature_facts": a.n_signature_facts, "eval_chunk": a.eval_chunk}
    base |= {k: v for k, v in top.items() if v is not None}
    train = dict(base.get("train") or dataclasses.asdict(HFFinetuneConfig(model_path="-").train))
    train |= {k: v for k, v in {"steps": a.steps, "batch_size": a.batch_size, "lr": a.lr}.items() if v is not None}
    if a.steps is not None:
        train["warmup_steps"] = min(train.get("warmup_steps", 0), a.steps)
    base["train"] = TrainConfig(**train)
    lora = base.get("lora")
    if a.lora or a.lora_r is not None:
        lora = dict(lora or {}) | ({"r": a.lora_r} if a.lora_r is not None else {})
    base["lora"] = LoraSettings(**lora) if isinstance(lora, dict) else lora
    return HFFinetuneConfig(**base)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", help="YAML file of HFFinetuneConfig fields (flags below override it)")
    ap.add_argument("--model", help="local checkpoint directory (config.json + safetensors + tokenizer)")
    ap.add_argument("--objective", choices=["auto", "ar", "mdm"])
    ap.add_argument("--mask-token-id", type=int)
    ap.add_argument("--bos-token-id", type=int)
    ap.add_argument("--dataset", choices=["person_description", "celebrity"])
    ap.add_argument("--n-facts", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--batch-size", type=int, help="global batch (split over torchrun ranks)")
    ap.add_argument("--lr", type=float)
    ap.add_argument("--lora", action="store_true", help="train LoRA adapters only (peft)")
    ap.add_argument("--lora-r", type=int, help="LoRA rank (implies --lora)")
    ap.add_argument("--eval-every", type=int)
    ap.add_argument("--n-signature-facts", type=int)
    ap.add_argument("--eval-chunk", type=int)
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--device")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    try:
        cfg = build_config(a)
        res = finetune(cfg, a.out, progress=not a.no_progress)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if init_from_env().is_main:
        last = res["signatures"][-1]
        print(json.dumps({k: res[k] for k in ("format", "objective", "forward_acc", "reverse_acc", "chance")}
                         | {k: last.get(k) for k in ("reverse_p", "grad_cosine", "attn_corr")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
