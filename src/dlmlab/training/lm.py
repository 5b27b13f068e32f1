"""`dlmlab train` / `dlmlab eval`: an LM of any family (transformer, mamba, mamba2, lstm, gru) on a text
corpus, AR or masked diffusion (mdlm)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dlmlab import outdir
from dlmlab.config import Config, ConfigError, from_dict, load_json, load_yaml, require
from dlmlab.data import DataConfig, TokenStream, load_corpus, load_tokenizer
from dlmlab.errors import UserError
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.models import TransformerConfig
from dlmlab.models.factory import build_model
from dlmlab.objectives import ARObjective, MaskedDiffusionObjective
from dlmlab.objectives.schedule import NoiseSchedule
from dlmlab.training.card import CARD_NAME, FAMILIES, OBJECTIVES, OLD_OBJECTIVE_NAMES, family_of
from dlmlab.training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from dlmlab.training.config import TrainConfig
from dlmlab.training.distributed import init_from_env
from dlmlab.training.loop import train
from dlmlab.training.noise import default_noise, noise_from_data, noise_to_data


# Config classes of the non-transformer families as a run config holds them: ``vocab_size`` may be 0
# there (taken from the tokenizer, as for the transformer); every other field is checked as usual.
_RUN_MODEL_CLASSES: dict[str, type] = {}


def _run_model_class(family: str) -> type:
    """The config class of ``family`` inside a :class:`RunConfig` (``model.vocab_size`` 0 allowed)."""
    if family == "transformer":
        return TransformerConfig
    if family not in _RUN_MODEL_CLASSES:
        from dlmlab.models.mamba import MambaConfig
        from dlmlab.models.mamba2 import Mamba2Config
        from dlmlab.models.recurrent import RecurrentConfig

        base = {"mamba": MambaConfig, "mamba2": Mamba2Config, "lstm": RecurrentConfig, "gru": RecurrentConfig}[family]

        def validate(self, base=base) -> None:
            if self.vocab_size == 0:  # check the other fields as they will be once the vocabulary is known
                probe = copy.copy(self)
                probe.vocab_size = 1
                base.validate(probe)
            else:
                base.validate(self)

        cls = dataclass(type(base.__name__, (base,), {
            "__doc__": f"{base.__doc__}\n\n    In a run config ``vocab_size`` 0 means: from the tokenizer.",
            "__module__": __name__, "__qualname__": base.__name__, "validate": validate}))
        _RUN_MODEL_CLASSES[family] = cls
    return _RUN_MODEL_CLASSES[family]


def model_from_dict(data: dict, where: str = "model"):
    """A run's ``model`` section (``family`` + that family's config fields) -> the family's config object.

    ``family`` defaults to ``transformer`` (configs written before families existed load unchanged).
    """
    data = dict(data)
    family = data.pop("family", "transformer")
    if family not in FAMILIES:
        raise ConfigError(f"{where}.family: {family!r} is not one of {list(FAMILIES)}")
    if family in ("lstm", "gru"):
        cell = data.setdefault("cell", family)
        if cell != family:
            raise ConfigError(f"{where}.cell {cell!r} contradicts {where}.family {family!r}; give only {where}.family")
    try:
        return from_dict(_run_model_class(family), data, where)
    except ConfigError as e:  # an unknown field: say that family is allowed too
        msg = str(e)
        if not msg.startswith("unknown field") or "(allowed: " not in msg:
            raise
        raise ConfigError(msg.replace("(allowed: ", f"(allowed for family {family}: family, ", 1)) from None


def model_to_dict(model_cfg) -> dict:
    """The inverse of :func:`model_from_dict`: ``{"family": ..., **fields}``."""
    return {"family": family_of(model_cfg), **dataclasses.asdict(model_cfg)}


def run_config_dict(cfg: "RunConfig") -> dict:
    """``cfg`` as plain data, ``model.family`` included (what ``config.json`` holds).

    ``noise`` is ``{"name": ..., **fields}``, and left out when the run names no schedule (so the
    ``config.json`` of such a run is what it was before runs could name one)."""
    d = dataclasses.asdict(cfg)
    d["model"] = model_to_dict(cfg.model)
    if cfg.noise is None:
        del d["noise"]
    else:
        d["noise"] = noise_to_data(cfg.noise)
    return d


@dataclass
class RunConfig(Config):
    """A whole LM training run.  ``model.vocab_size`` is taken from the tokenizer (plus one mask id for mdlm).

    ``model`` is the config of one family, chosen by ``model.family`` in YAML / JSON: ``transformer``
    (default; :class:`~dlmlab.models.TransformerConfig`), ``mamba``, ``mamba2``, ``lstm`` or ``gru``
    (their configs in :mod:`dlmlab.models`).  Checked when built or loaded (also the sections together:
    the model must fit ``data.seq_len``; ``mdlm`` on a transformer needs a bidirectional mask).
    ``objective`` ``mdlm`` is masked diffusion; the old names ``dlm`` / ``mdm`` are refused naming it.
    ``noise``: the masked-diffusion noise schedule, ``{name: loglinear, eps: 1.0e-3}`` or a bare name in
    YAML (:mod:`dlmlab.training.noise`), a :class:`~dlmlab.objectives.schedule.NoiseSchedule` in Python;
    ``None`` (the default) is the linear schedule with its default ``eps`` (:attr:`noise_schedule`).
    """

    model: Any = field(default_factory=TransformerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    objective: str = "ar"  # "ar" | "mdlm" (checked by hand, so that an old name gets its own message)
    eval_batches: int = 8
    noise: Any = None  # None | NoiseSchedule (a mapping or a name is turned into one)

    @property
    def family(self) -> str:
        return family_of(self.model)

    @property
    def noise_schedule(self) -> NoiseSchedule:
        """The noise schedule an mdlm run trains and is evaluated with (``noise``, or the default linear)."""
        return self.noise if self.noise is not None else default_noise()

    def check(self) -> None:
        if self.objective in OLD_OBJECTIVE_NAMES:
            raise ConfigError(f"objective: {self.objective!r} is an old name of masked diffusion; write "
                              f"objective: {OLD_OBJECTIVE_NAMES[self.objective]}")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective: {self.objective!r} is not one of {list(OBJECTIVES)}")
        super().check()

    def derive(self) -> None:
        if self.noise is not None:
            self.noise = noise_from_data(self.noise)
        if isinstance(self.model, dict):
            self.model = model_from_dict(self.model)
        elif not dataclasses.is_dataclass(self.model):
            raise ConfigError(f"model: expected a mapping, got {type(self.model).__name__}")
        else:
            try:
                family = family_of(self.model)
            except UserError:
                raise ConfigError(f"model: {type(self.model).__name__} is not the config of a model family "
                                  f"({', '.join(FAMILIES)})") from None
            if type(self.model) is not _run_model_class(family):  # one class per family, so configs compare equal
                self.model = model_from_dict(model_to_dict(self.model))

    def validate(self) -> None:
        require(self.eval_batches > 0, f"eval_batches must be > 0, got {self.eval_batches}")
        if self.noise is not None and self.objective != "mdlm":
            raise ConfigError(f"noise: a noise schedule is for objective 'mdlm'; this run's objective is "
                              f"{self.objective!r} (remove the noise section)")
        if not isinstance(self.model, TransformerConfig):
            return
        if self.objective == "mdlm" and self.model.attn_mask == "causal":
            raise ConfigError("objective 'mdlm' needs model.attn_mask 'bidirectional' (a causal mask cannot see right context)")
        if self.model.positions == "learned" and self.data.seq_len > self.model.max_seq_len:
            raise ConfigError(
                f"data.seq_len ({self.data.seq_len}) exceeds model.max_seq_len ({self.model.max_seq_len}) of learned "
                "positions; raise model.max_seq_len or lower data.seq_len")


def load_run_config(path: str | Path) -> RunConfig:
    return load_yaml(RunConfig, path)


def mask_id_of(cfg: RunConfig, data_vocab: int) -> int | None:
    """The mask token of an mdlm run: one id past the tokenizer's (``None`` for AR)."""
    return data_vocab if cfg.objective == "mdlm" else None


def build_run_model(cfg: RunConfig, data_vocab: int) -> torch.nn.Module:
    """A freshly initialised model for ``cfg`` (any family) with ``data_vocab`` tokenizer ids."""
    extra = 1 if cfg.objective == "mdlm" else 0
    fields = dict(dataclasses.asdict(cfg.model), vocab_size=data_vocab + extra)
    return build_model(family_of(cfg.model), match_params=False, **fields)


def run_objective(cfg: RunConfig, vocab: int):
    """The run's :class:`~dlmlab.objectives.objective.Objective`: AR, or masked diffusion with mask id ``vocab``
    (the last id of the model vocabulary) under the run's noise schedule."""
    if cfg.objective == "ar":
        return ARObjective()
    return MaskedDiffusionObjective(vocab, cfg.noise_schedule)


def make_lm_task(cfg: RunConfig, stream: TokenStream, vocab: int):
    """(make_batch, loss_fn) for the run's objective; noise is drawn in make_batch (global batch)."""
    T, B = cfg.data.seq_len, cfg.train.batch_size
    obj = run_objective(cfg, vocab)

    def make_batch(step: int, gen: torch.Generator) -> dict:
        x = TokenStream.windows(stream.train, B, T + (1 if cfg.objective == "ar" else 0), gen)
        return obj.make_batch(x, gen)

    return make_batch, obj.loss


@torch.no_grad()
def evaluate_lm(model: torch.nn.Module, cfg: RunConfig, stream: TokenStream, vocab: int) -> dict:
    """Held-out perplexity (AR) or ELBO perplexity bound (MDLM, under the run's noise schedule) on fixed
    validation windows."""
    model.eval()
    T = cfg.data.seq_len
    obj = run_objective(cfg, vocab)
    x = TokenStream.chunks(stream.val, T + 1, limit=cfg.eval_batches * cfg.train.batch_size)
    if cfg.objective == "ar":
        losses = [obj.loss(model, obj.make_batch(xb))[0].item() for xb in x.split(cfg.train.batch_size)]
        nll = sum(losses) / len(losses)
        return {"nll": nll, "ppl": math.exp(nll)}
    g = torch.Generator().manual_seed(1234)
    losses = [obj.loss(model, obj.make_batch(xb[:, :T], g))[0].item() for xb in x.split(cfg.train.batch_size)]
    nll = sum(losses) / len(losses)
    return {"nelbo": nll, "ppl_bound": math.exp(nll)}


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

    A config without ``model.family`` (written before families existed) is a transformer's; one without
    ``noise`` (written before runs named a schedule, or naming none) has the default schedule."""
    a, b = _flat(old), _flat(new)
    default = _flat({"noise": noise_to_data(default_noise())})
    for d in (a, b):
        if any(k.startswith("model.") for k in d):
            d.setdefault("model.family", "transformer")
        if d.get("noise", 0) is None:
            del d["noise"]
        if not any(k.startswith("noise.") for k in d):
            d.update(default)
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


def _card_noise(cfg: RunConfig) -> dict:
    """``{"noise": schedule}`` for :func:`train` (recorded in ``model.json``); mdlm runs only."""
    return {"noise": cfg.noise_schedule} if cfg.objective == "mdlm" else {}


def run_training(cfg: RunConfig, out_dir: str | Path, resume: bool = True) -> dict:
    """Train per ``cfg`` into ``out_dir`` (config.json, tokenizer.json, model.json, metrics.jsonl, checkpoints/).

    ``model.json`` and ``tokenizer.json`` (also in every checkpoint folder) make the run, or any of its
    checkpoints, load with :func:`dlmlab.load`.

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
        diffs = config_differences(old if isinstance(old, dict) else {}, run_config_dict(cfg))
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
        atomic_write_text(cfg_path, strict_json(run_config_dict(cfg), indent=1))
    ctx.barrier()
    if not ctx.is_main:
        stream, tokenizer = load_corpus(cfg.data, load_tokenizer(tok_path))
        model = build_model()
    make_batch, loss_fn = make_lm_task(cfg, stream, tokenizer.vocab_size)
    eval_fn = lambda m, step: evaluate_lm(m, cfg, stream, tokenizer.vocab_size)  # noqa: E731
    history = train(model, cfg.train, make_batch, loss_fn, out_dir=out, eval_fn=eval_fn, resume=True,
                    desc=f"train {cfg.family} {cfg.objective}", objective=cfg.objective,
                    mask_id=mask_id_of(cfg, tokenizer.vocab_size), tokenizer=tokenizer, **_card_noise(cfg))
    final = evaluate_lm(model, cfg, stream, tokenizer.vocab_size)
    if ctx.is_main:
        atomic_write_text(out / "eval.json", strict_json(final, indent=1))
    return {"history": history, "eval": final}


def load_run(path: str | Path) -> tuple[torch.nn.Module, RunConfig, object]:
    """Model, config and tokenizer of a finished or partial ``dlmlab train`` run: ``path`` is the run
    folder (its latest checkpoint) or one of its ``checkpoints/step_N`` folders (that checkpoint).
    :func:`dlmlab.load` loads these and more (runs of ``train()``, Hugging Face folders)."""
    p = Path(path)
    ck = None
    if (p / "model.safetensors").is_file() and p.parent.name == "checkpoints":
        ck, p = p, p.parent.parent
    if not (p / "config.json").exists():
        raise CheckpointError(f"{p} is not a dlmlab run directory (no config.json)")
    cfg = load_json(RunConfig, p / "config.json", hint="the run directory is damaged: train it again")
    ck = ck or latest_checkpoint(p)
    if ck is None:
        raise CheckpointError(f"no checkpoint in {p}/checkpoints")
    # the run's tokenizer, else the copy every checkpoint keeps
    tok_path = next((d / "tokenizer.json" for d in (p, ck) if (d / "tokenizer.json").is_file()), None)
    if tok_path is None:
        raise CheckpointError(f"{p / 'tokenizer.json'} is missing (and {ck} has no copy), so the run's text cannot "
                              "be encoded; copy the tokenizer.json of the run back into the folder")
    tokenizer = load_tokenizer(tok_path)
    model = build_run_model(cfg, tokenizer.vocab_size)
    load_checkpoint(ck, model)
    return model.eval(), cfg, tokenizer
