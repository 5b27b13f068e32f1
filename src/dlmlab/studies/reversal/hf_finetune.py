"""Forward-only fine-tuning of a Hugging Face checkpoint on relation facts, then reverse evaluation.

The checkpoint is read from a local directory (no downloads): weights + config + tokenizer, e.g. a
LLaMA / Qwen2 causal LM, or a diffusion LM of that architecture (LLaDA: LLaMA-like, predicts the token
at the masked position; Dream: Qwen2-like, keeps the AR shift so position i-1 predicts token i).

* ``objective="ar"``: next-token fine-tuning with the model's causal attention.
* ``objective="mdm"``: masked-diffusion fine-tuning (MDLM loss) with *bidirectional* attention, given by
  passing an all-zero additive 4-D attention mask (HF uses a 4-D mask as is); ``mask_token_id`` is the
  tokenizer's mask token unless given; ``shift_logits`` selects the Dream convention.

Data: the person -> description facts (``p2d_prompts_train``, see :mod:`dlmlab.studies.reversal.real`);
evaluation ranks the true description (forward, held-out templates) and the true name (reverse:
description -> name) among ``n_facts`` candidates by the model's likelihood.

Usage::

    python -m dlmlab.studies.reversal.hf_finetune --model /path/to/local/ckpt --objective mdm \\
        --out runs/hf_mdm --steps 500 --lr 1e-5 --n-facts 30 [--mask-token-id 126336] [--shift-logits]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from dlmlab.config import ConfigError, require
from dlmlab.studies.reversal.presets import RealDataPreset
from dlmlab.studies.reversal.real import fit_and_rank, prepare
from dlmlab.training import TrainConfig


@dataclass
class HFFinetuneConfig:
    model_path: str = ""
    objective: Literal["ar", "mdm"] = "mdm"
    mask_token_id: int = -1  # -1: the tokenizer's mask token (mdm only)
    shift_logits: bool = False  # Dream-style: logits at i-1 predict token i
    n_facts: int = 30
    seq_len: int = 96
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    seed: int = 0
    train: TrainConfig = field(default_factory=lambda: TrainConfig(steps=500, batch_size=16, lr=1e-5, warmup_steps=20,
                                                                   weight_decay=0.0, log_every=10))

    def validate(self) -> None:
        require(bool(self.model_path), "model_path must point at a local Hugging Face checkpoint directory")
        require(1 < self.n_facts <= 30, f"n_facts must be in [2, 30], got {self.n_facts}")


class HFLogits(nn.Module):
    """Wrap a HF causal-LM so that ``forward(tokens [B,T]) -> logits [B,T,V]`` like a toolkit model.

    ``bidirectional``: every position attends to every position (additive 4-D mask of zeros).
    ``shift``: return logits aligned so position i scores token i when the model predicts i from i-1.
    """

    def __init__(self, hf_model: nn.Module, bidirectional: bool, shift: bool = False) -> None:
        super().__init__()
        self.hf, self.bidirectional, self.shift = hf_model, bidirectional, shift

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.hf.device)
        kw = {}
        if self.bidirectional:
            B, T = tokens.shape
            kw["attention_mask"] = torch.zeros(B, 1, T, T, dtype=self.hf.dtype, device=tokens.device)
        logits = self.hf(input_ids=tokens, **kw).logits.float()
        if self.shift:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits


class _Encoder:
    """``encode(text) -> ids`` without special tokens, for the ranking code."""

    def __init__(self, tok) -> None:
        self.tok = tok
        self.vocab_size = len(tok)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_local(path: str | Path, dtype: str = "float32", device: str = "auto"):
    """(model, tokenizer) from a local checkpoint directory; clear errors for a wrong path."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"no local checkpoint directory at {p}")
    if not (p / "config.json").exists():
        raise FileNotFoundError(f"{p} has no config.json (not a Hugging Face checkpoint)")
    tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(p), local_files_only=True, dtype=getattr(torch, dtype))
    return model.to(_device(device)), tok


def finetune(cfg: HFFinetuneConfig, out: str | Path | None = None, progress: bool = True) -> dict:
    """Fine-tune forward-only and rank forward / reverse completions; writes ``out/hf_reversal.json``."""
    cfg.validate()
    model, tok = load_local(cfg.model_path, cfg.dtype, cfg.device)
    mask_id = cfg.mask_token_id if cfg.mask_token_id >= 0 else (tok.mask_token_id if tok.mask_token_id is not None else -1)
    if cfg.objective == "mdm" and mask_id < 0:
        raise ConfigError("objective 'mdm' needs a mask token: the tokenizer has none, pass mask_token_id")
    vocab = model.get_output_embeddings().weight.shape[0]
    if mask_id >= vocab:
        raise ConfigError(f"mask_token_id {mask_id} is outside the model's vocabulary of {vocab}")
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    if pad_id is None:
        raise ConfigError("the tokenizer has neither a pad nor an eos token to pad with")
    kind = "mdm" if cfg.objective == "mdm" else "arm"
    data_cfg = RealDataPreset(enabled=True, n_facts=cfg.n_facts, seq_len=cfg.seq_len)
    task = prepare(data_cfg, tokenizer=_Encoder(tok), pad_id=pad_id, mask_id=max(mask_id, 0))
    wrapped = HFLogits(model, bidirectional=kind == "mdm", shift=cfg.shift_logits)
    torch.manual_seed(cfg.seed)
    res = fit_and_rank(wrapped, task, kind, cfg.train, cfg.seq_len, cfg.seed, progress,
                       desc=f"hf {cfg.objective}", out_dir=Path(out) / "train" if out else None)
    result = {"model_path": str(cfg.model_path), "objective": cfg.objective, "chance": 1.0 / cfg.n_facts, **res,
              "config": dataclasses.asdict(cfg)}
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "hf_reversal.json").write_text(json.dumps(result, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local Hugging Face checkpoint directory")
    ap.add_argument("--objective", choices=["ar", "mdm"], default="mdm")
    ap.add_argument("--mask-token-id", type=int, default=-1)
    ap.add_argument("--shift-logits", action="store_true", help="Dream-style AR shift of the logits")
    ap.add_argument("--n-facts", type=int, default=30)
    ap.add_argument("--seq-len", type=int, default=96)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    cfg = HFFinetuneConfig(model_path=a.model, objective=a.objective, mask_token_id=a.mask_token_id,
                           shift_logits=a.shift_logits, n_facts=a.n_facts, seq_len=a.seq_len, dtype=a.dtype,
                           device=a.device, train=TrainConfig(steps=a.steps, batch_size=a.batch_size, lr=a.lr,
                                                              warmup_steps=min(20, a.steps), weight_decay=0.0,
                                                              log_every=10))
    res = finetune(cfg, a.out, progress=not a.no_progress)
    print(json.dumps({k: res[k] for k in ("objective", "forward_acc", "reverse_acc", "chance")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
