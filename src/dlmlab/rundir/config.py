"""A ``dlmlab train`` run as data: :class:`RunConfig` (``config.json``), the model and objective it builds, and
:func:`load_run` (a run written before ``model.json`` existed loads from its ``config.json``)."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dlmlab.config import Config, ConfigError, from_dict, load_json, load_yaml, require
from dlmlab.data import DataConfig
from dlmlab.data.tokenizer import load_tokenizer
from dlmlab.errors import UserError
from dlmlab.models import TransformerConfig
from dlmlab.models.factory import build_model
from dlmlab.models.protocol import FAMILIES
from dlmlab.objectives import ARObjective, LinearSchedule, MaskedDiffusionObjective
from dlmlab.objectives.card import OLD_OBJECTIVE_NAMES
from dlmlab.objectives.schedule import NoiseSchedule, parse_schedule
from dlmlab.rundir.card import family_of
from dlmlab.rundir.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from dlmlab.training.config import TrainConfig

OBJECTIVES = ("ar", "mdlm")  # what a run config's objective may be

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
        d["noise"] = cfg.noise.to_data()
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
    YAML (:func:`~dlmlab.objectives.schedule.parse_schedule`), a :class:`~dlmlab.objectives.schedule.NoiseSchedule` in Python;
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
        return self.noise if self.noise is not None else LinearSchedule()

    def check(self) -> None:
        if self.objective in OLD_OBJECTIVE_NAMES:
            raise ConfigError(f"objective: {self.objective!r} is an old name of masked diffusion; write "
                              f"objective: {OLD_OBJECTIVE_NAMES[self.objective]}")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective: {self.objective!r} is not one of {list(OBJECTIVES)}")
        super().check()

    def derive(self) -> None:
        if self.noise is not None:
            self.noise = parse_schedule(self.noise)
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
