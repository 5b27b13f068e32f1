"""Typed presets of the PreDiff study (smoke: CI seconds; cpu: minutes on 2 cores; paper: GPT-2 on WikiText-103, GPU)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Literal

from dlmlab.config import Config, ConfigError, require
from dlmlab.models import TransformerConfig
from dlmlab.prediff.model import MASK_INITS
from dlmlab.prediff.objectives import LOSSES, METHODS, Loss, prompt_length
from dlmlab.studies.prediff.threshold import PLATEAU_SHARE
from dlmlab.training import TrainConfig


@dataclass
class PreDiffPreset(Config):  # checked when built: options, finite numbers, validate()
    """One run: obtain a causal backbone, adapt it with every method under one budget, evaluate, sample.

    ``backbone_path`` empty: pretrain ``model`` as a GPT-2-architecture AR model on ``corpus`` (BPE of
    ``bpe_vocab`` trained locally), export it in HF format and load it back.  Otherwise a local HF
    directory (``backbone_kind`` gpt2 or llama) with its ``tokenizer.json``.  Values ``$NAME`` are read
    from the environment (the paper preset's local paths).
    """

    corpus: str = "tinyshakespeare"
    val_fraction: float = 0.1
    bpe_vocab: int = 1024
    seq_len: int = 64
    backbone_path: str = ""
    backbone_kind: Literal["gpt2", "llama"] = "gpt2"
    # cpu sizes: 18 adaptations (6 methods x 3 seeds) must fit the 9-minute budget on 2 cores; at d_model 64
    # and batch 16 the unshifted curves flatten after a few hundred steps (tuning runs: prediff's held-out bound
    # changed by < 5% between steps 300 and 800; the run's PPL-vs-steps figure shows it)
    model: TransformerConfig = field(default_factory=lambda: TransformerConfig(
        d_model=64, n_layers=4, n_heads=4, d_mlp=256, mlp="gelu_new", max_seq_len=128))
    pretrain: TrainConfig = field(default_factory=lambda: TrainConfig(steps=1000, batch_size=32, lr=2e-3, warmup_steps=100,
                                                                       log_every=50, keep_checkpoints=1))
    adapt: TrainConfig = field(default_factory=lambda: TrainConfig(steps=500, batch_size=16, lr=5e-4, warmup_steps=20,
                                                                    log_every=25, keep_checkpoints=1))
    scratch_lr: float = 2e-3  # from-scratch training gets the pretraining learning rate
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # every method adapts once per seed
    prompt_frac: float = 0.5  # clean prompt = this fraction of each window, in training and evaluation (study: half)
    loss: Loss = "masked_ce"  # the study's masked-token CE with cosine mask rates, or "mdlm_bound"
    mask_init: Literal["random", "mean"] = "random"  # the mask token's embedding row (the study's code: random)
    original_eval_n_t: int = 16  # midpoint-rule mask rates of the study code's 1/(1-t)-weighted evaluation
    curve_every: int = 50  # evaluate the held-out PPL (bound) every this many adaptation steps
    curve_windows: int = 32
    curve_n_t: int = 2
    eval_windows: int = 128
    eval_n_t: int = 4
    n_prompts: int = 32
    sample_prompt_len: int = 32  # samples continue half a window from its first half, as in training
    gen_len: int = 32
    sample_steps: list[int] = field(default_factory=lambda: [8, 32])
    temperature: float = 1.0
    top_p: float = 0.95
    speed_batch: int = 1  # CPU: one prompt at a time (latency); the paper preset uses a GPU batch
    speed_repeats: int = 10  # interleaved timing rounds: the speed claim's interval is over their per-round ratios
    lambada_limit: int = 500
    device: str = "cpu"  # cpu | cuda | cuda:N | auto (cuda when available, else cpu; see resolved_device)

    def validate(self) -> None:
        require(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
                f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        unknown = [m for m in self.methods if m not in METHODS]
        require(not unknown, f"unknown methods {unknown}; choose from {sorted(METHODS)}")
        require(len(set(self.methods)) == len(self.methods) > 0, "methods must be non-empty and distinct")
        require(self.seq_len >= 8, f"seq_len must be >= 8, got {self.seq_len}")
        require(0 < self.prompt_frac < 1, f"prompt_frac must be in (0, 1), got {self.prompt_frac}")
        require(self.loss in LOSSES, f"loss must be one of {LOSSES}, got {self.loss!r}")
        require(self.mask_init in MASK_INITS, f"mask_init must be one of {MASK_INITS}, got {self.mask_init!r}")
        require(len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds), "seeds must be non-empty and distinct")
        require(self.original_eval_n_t >= 1, "original_eval_n_t must be >= 1")
        require(self.sample_prompt_len >= 1 and self.gen_len >= 1, "sample_prompt_len and gen_len must be >= 1")
        require(self.sample_prompt_len + self.gen_len <= self.model.max_seq_len,
                "sample_prompt_len + gen_len must fit model.max_seq_len")
        require(self.seq_len <= self.model.max_seq_len, "seq_len must fit model.max_seq_len")
        require(self.n_prompts >= 2, "n_prompts must be >= 2 (Self-BLEU / MAUVE need several samples)")
        require(all(s >= 1 for s in self.sample_steps) and self.sample_steps, "sample_steps must be >= 1")
        require(self.curve_every >= 1 and self.curve_windows >= 1 and self.eval_windows >= 1, "eval sizes must be >= 1")
        last = self.adapt.steps // self.curve_every * self.curve_every  # the last curve point's step
        require(last >= (1 - PLATEAU_SHARE) * self.adapt.steps,
                f"curve_every must put a curve point in the last {PLATEAU_SHARE:.0%} of adapt.steps (the plateau "
                f"behind the threshold is their mean), got {self.curve_every} for {self.adapt.steps} steps")

    def resolved_device(self) -> str:
        """``device`` with ``auto`` resolved on this machine: cuda when available, else cpu."""
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    @property
    def prompt_len(self) -> int:
        """Clean-prompt tokens of a ``seq_len`` window (training and held-out evaluation)."""
        return prompt_length(self.prompt_frac, self.seq_len)

    def resolved(self, value: str) -> str:
        """``$NAME`` -> the environment variable's value (clear error when unset)."""
        if value.startswith("$"):
            name = value[1:]
            if not os.environ.get(name):
                raise ConfigError(f"this preset needs the environment variable {name} (a local path; nothing is downloaded)")
            return os.environ[name]
        return value


def _smoke() -> PreDiffPreset:
    return PreDiffPreset(
        bpe_vocab=384, seq_len=32,
        model=TransformerConfig(d_model=48, n_layers=2, n_heads=2, d_mlp=192, mlp="gelu_new", max_seq_len=48),
        pretrain=TrainConfig(steps=120, batch_size=16, lr=3e-3, warmup_steps=10, log_every=20, keep_checkpoints=1, progress=False),
        adapt=TrainConfig(steps=20, batch_size=16, lr=1e-3, warmup_steps=2, log_every=5, keep_checkpoints=1, progress=False),
        scratch_lr=3e-3, curve_every=5, curve_windows=8, curve_n_t=1, eval_windows=16, eval_n_t=2, seeds=[0, 1],
        n_prompts=8, sample_prompt_len=16, gen_len=16, original_eval_n_t=4, sample_steps=[8, 32], speed_batch=1, speed_repeats=1,
        lambada_limit=20,
    )


def _cpu() -> PreDiffPreset:
    return PreDiffPreset()


def _paper() -> PreDiffPreset:
    """GPT-2 (124M) from a local HF directory, adapted on WikiText-103 (a local text file), on one GPU."""
    return PreDiffPreset(
        corpus="$DLMLAB_WIKITEXT103", val_fraction=0.005, seq_len=512, backbone_path="$DLMLAB_GPT2_DIR",
        model=TransformerConfig(max_seq_len=1024),
        adapt=TrainConfig(steps=20000, batch_size=32, lr=1e-4, warmup_steps=500, log_every=100, ckpt_every=1000,
                          keep_checkpoints=2),
        scratch_lr=6e-4, curve_every=1000, curve_windows=256, curve_n_t=2, eval_windows=2048,
        eval_n_t=8, n_prompts=512, sample_prompt_len=256, gen_len=256, sample_steps=[8, 32, 128],
        speed_batch=32, speed_repeats=5, device="auto",
    )


PRESETS: dict[str, PreDiffPreset] = {"smoke": _smoke(), "cpu": _cpu(), "paper": _paper()}


def first_steps(preset: PreDiffPreset, steps: int) -> PreDiffPreset:
    """The ``paper`` preset cut to ``steps`` optimizer steps per model, to prove the paper path end to end
    (``scripts/paper_first_steps.py``): the backbone, its tokenizer and every model shape are the preset's;
    only training lengths, the batch (2), the windows (64 tokens, prompt half), the seeds (one) and the
    evaluation, sampling and timing sizes shrink (2 prompts, the fewest Self-BLEU / MAUVE take, and 8 generated
    tokens: sampling and its timing were the largest costs after training), so that every method, analysis and
    claim runs on a CPU in a few minutes (GPT-2's 85M non-embedding parameters: about a second per forward
    there).  Its claims say nothing about the study."""
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")
    cap = lambda t: dataclasses.replace(t, steps=min(t.steps, steps), batch_size=min(t.batch_size, 2),  # noqa: E731
                                        warmup_steps=min(t.warmup_steps, steps // 2), log_every=1, ckpt_every=0,
                                        keep_checkpoints=1, progress=False)
    return dataclasses.replace(
        preset, pretrain=cap(preset.pretrain), adapt=cap(preset.adapt), seeds=list(preset.seeds[:1]),
        seq_len=min(preset.seq_len, 64), curve_every=min(preset.curve_every, steps), curve_windows=2, curve_n_t=1, eval_windows=4, eval_n_t=1,
        original_eval_n_t=1, n_prompts=2, sample_prompt_len=16, gen_len=8, sample_steps=[8], speed_batch=1,
        speed_repeats=3, lambada_limit=2)
