"""The dlmlab backend's options (``--model_args path=RUN,step=N,mc_num=K,batch_size=B,...``): one typed dataclass."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from dlmlab.config import Config, require
from dlmlab.errors import UserError
from dlmlab.lmeval.estimators import METHODS


@dataclass
class LMEvalConfig(Config):
    """Options of :class:`~dlmlab.lmeval.DlmlabLM`.

    path: anything :func:`dlmlab.load` opens (run, checkpoint, Hugging Face folder); step: a run's checkpoint.
    mc_num: forwards per masked-diffusion loglikelihood request (per rolling window); estimator: ``dlmlab``
        (exact for short continuations, else stratified counts, tiled masks and a control variate) or
        ``llada`` (LLaDA's / Dream's estimator); llada_batch: LLaDA's rows per stratified batch.
    batch_size: rows per forward.  seed: Monte Carlo draws are seeded per request from it and the
        request's tokens (independent of batching and order).
    greedy_check: masked-diffusion ``is_greedy`` by greedy one-token-per-step decoding of the continuation
        (``len(continuation)`` forwards; False: reported as False).
    max_length: the model's context (0: the model's positions, else 2048).
    rolling_context: masked-diffusion rolling windows keep this many preceding tokens as an unmasked
        prompt (0: disjoint windows, the bound ``dlmlab eval`` computes).
    gen_steps / block_len / threshold / kv_reuse / order: the masked-diffusion sampler (gen_steps 0: one
        step per generated token; kv_reuse as ``dlmlab sample --kv-reuse``); temperature: sampling temperature (0: greedy; a task's
        ``temperature`` / ``do_sample`` gen_kwargs override it); max_gen_toks: default tokens generated.
    add_bos_token: passed to a Hugging Face tokenizer's ``encode`` as ``add_special_tokens`` (None: its default,
        as the harness's ``hf`` backend does).
    """

    path: str = ""
    step: int | None = None
    mc_num: int = 32
    estimator: Literal["dlmlab", "llada"] = "dlmlab"
    llada_batch: int = 32
    batch_size: int = 16
    seed: int = 1234
    greedy_check: bool = True
    max_length: int = 0
    rolling_context: int = 0
    gen_steps: int = 0
    block_len: int = 0
    threshold: float | None = None
    kv_reuse: Literal["none", "prompt", "prefix", "dual"] = "none"
    order: str = "confidence"
    temperature: float = 0.0
    max_gen_toks: int = 256
    add_bos_token: bool | None = None
    dtype: Literal["float32", "float64", "bfloat16"] = "float32"
    device: str = "cpu"

    def validate(self) -> None:
        require(bool(self.path), "model_args needs path=RUN (a run, checkpoint or Hugging Face folder)")
        require(self.mc_num >= 1, f"mc_num must be >= 1, got {self.mc_num}")
        require(self.estimator in METHODS, f"estimator must be one of {list(METHODS)}, got {self.estimator!r}")
        require(self.llada_batch >= 1, f"llada_batch must be >= 1, got {self.llada_batch}")
        require(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        require(self.max_length >= 0, f"max_length must be >= 0, got {self.max_length}")
        require(self.rolling_context >= 0, f"rolling_context must be >= 0, got {self.rolling_context}")
        require(self.gen_steps >= 0, f"gen_steps must be >= 0, got {self.gen_steps}")
        require(self.max_gen_toks >= 1, f"max_gen_toks must be >= 1, got {self.max_gen_toks}")
        require(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}")


def from_model_args(args: dict[str, Any]) -> LMEvalConfig:
    """The config from the harness's parsed ``model_args`` plus its ``batch_size`` / ``device`` /
    ``max_batch_size`` (``batch_size`` ``auto`` keeps the default)."""
    from dlmlab.config import from_dict

    args = {k: v for k, v in args.items() if v is not None}
    for old, new in RENAMED.items():
        if old in args:
            raise UserError(f"model_args: {old}= was renamed {new}= (as `dlmlab sample --kv-reuse`)")
    args.pop("max_batch_size", None)
    bs = args.get("batch_size")
    if isinstance(bs, str):
        if bs.startswith("auto"):
            args.pop("batch_size")
        elif bs.isdigit():
            args["batch_size"] = int(bs)
    if "path" not in args and "pretrained" in args:  # the hf backend's name for it
        args["path"] = args.pop("pretrained")
    for k in ("path", "device", "order"):
        if k in args:
            args[k] = str(args[k])
    for k in ("threshold", "temperature"):
        if isinstance(args.get(k), int) and not isinstance(args.get(k), bool):
            args[k] = float(args[k])
    for k in _INT_FIELDS:  # the harness's command line reads "-3" as -3.0
        if isinstance(args.get(k), float) and args[k].is_integer():
            args[k] = int(args[k])
    return from_dict(LMEvalConfig, args, "model_args")


RENAMED = {"cache": "kv_reuse"}  # old model_args name -> new (refused with a line naming the new one)
_INT_FIELDS = tuple(f.name for f in dataclasses.fields(LMEvalConfig) if str(f.type).split(" |")[0] == "int")
