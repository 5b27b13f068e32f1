"""A ``dlmlab train`` run as data: :class:`RunConfig` (``config.json``), the model and objective it builds, and
:func:`load_run` (the model, config and tokenizer of a run folder).

The run's ``objective`` section is the objective's card (:mod:`dlmlab.objectives.card`): a registered name
(``ar``, ``mdlm``, or one added with :func:`~dlmlab.objectives.register_objective`) or ``{name: ...,
**fields}``; the objective decides the ids it adds to the tokenizer's vocabulary (``added_ids``: the mask
token), the window a row needs and how the model is evaluated.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dlmlab.config import Config, ConfigError, from_dict, load_json, load_yaml, require
from dlmlab.data import DataConfig
from dlmlab.errors import UserError
from dlmlab.models import TransformerConfig
from dlmlab.models.factory import build_model
from dlmlab.models.protocol import FAMILIES
from dlmlab.objectives.card import objective_from_section, objective_section
from dlmlab.objectives.schedule import parse_schedule
from dlmlab.rundir.card import family_of
from dlmlab.rundir.checkpoint import CheckpointError
from dlmlab.training.config import TrainConfig

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
    """``cfg`` as plain data, ``model.family`` included (what ``config.json`` holds); the objective as its
    section (:func:`~dlmlab.objectives.card.objective_section`)."""
    d = dataclasses.asdict(cfg)
    d["model"] = model_to_dict(cfg.model)
    d["objective"] = objective_section(cfg.objective)
    del d["noise"]
    return d


def normalized_config(data: dict) -> dict:
    """A ``config.json`` as data, its objective written as :func:`run_config_dict` writes it: a config written
    before the objective section was the objective's card (``objective: mdlm`` beside a ``noise`` section)
    compares equal to the same run's config today.  Data that does not describe an objective stays as it is."""
    if not isinstance(data, dict) or "objective" not in data and "noise" not in data:
        return data
    out = dict(data)
    section = out.get("objective", "ar")
    noise = out.pop("noise", None)
    try:
        out["objective"] = objective_section(_with_noise(section, noise))
    except UserError:
        out["objective"], out["noise"] = section, noise  # reported as a difference
    return out


def _with_noise(section: Any, noise: Any, where: str = "objective"):
    """The objective of ``section`` with an old top-level ``noise`` section folded in (its ``noise`` field)."""
    objective = objective_from_section(section, where)
    if noise is None:
        return objective
    schedule = parse_schedule(noise, "noise")  # its errors name the section as written
    card = objective_section(objective)
    if "noise" not in card:
        raise ConfigError(f"noise: objective {card['name']!r} has no noise schedule (remove the noise section)")
    if isinstance(section, dict) and "noise" in section:
        raise ConfigError(f"noise: the schedule is given twice ({where}.noise and noise); keep {where}.noise")
    card["noise"] = schedule.to_data()
    return objective_from_section(card, where)


@dataclass
class RunConfig(Config):
    """A whole LM training run.  ``model.vocab_size`` is taken from the tokenizer (plus the ids the objective
    adds: the mask token under mdlm).

    ``model`` is the config of one family, chosen by ``model.family`` in YAML / JSON: ``transformer``
    (default; :class:`~dlmlab.models.TransformerConfig`), ``mamba``, ``mamba2``, ``lstm`` or ``gru``
    (their configs in :mod:`dlmlab.models`).  Checked when built or loaded (also the sections together:
    the model must fit ``data.seq_len``; a denoising objective (mdlm) on a transformer needs a bidirectional
    mask).  ``objective``: the objective's card, a name (``ar``, ``mdlm``; the old names ``dlm`` / ``mdm``
    are refused naming it) or ``{name: mdlm, noise: {name: loglinear, eps: 1.0e-3}, t_range: [lo, hi],
    pad_id: ...}`` in YAML (:func:`~dlmlab.objectives.card.objective_from_section`); an objective object in
    Python.  Its mask id is assigned when the tokenizer is known (:func:`run_objective`).
    ``noise``: the old spelling of ``objective.noise`` (a top-level schedule, folded into the objective).
    """

    model: Any = field(default_factory=TransformerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    objective: Any = "ar"  # a name, a section {name: ..., **fields}, or an objective (turned into one)
    eval_batches: int = 8
    noise: Any = None  # old spelling: folded into objective.noise, then None

    @property
    def family(self) -> str:
        return family_of(self.model)

    def derive(self) -> None:
        self.objective = _with_noise(self.objective, self.noise)
        self.noise = None
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
        if not isinstance(self.model, TransformerConfig):
            return
        if self.objective.denoises and self.model.attn_mask == "causal":
            raise ConfigError(f"objective {self.objective.name!r} needs model.attn_mask 'bidirectional' (a causal "
                              "mask cannot see right context)")
        if self.model.positions == "learned" and self.data.seq_len > self.model.max_seq_len:
            raise ConfigError(
                f"data.seq_len ({self.data.seq_len}) exceeds model.max_seq_len ({self.model.max_seq_len}) of learned "
                "positions; raise model.max_seq_len or lower data.seq_len")


def load_run_config(path: str | Path) -> RunConfig:
    return load_yaml(RunConfig, path)


def run_objective(cfg: RunConfig, data_vocab: int):
    """The run's objective with the ids it adds assigned for a tokenizer of ``data_vocab`` ids (mdlm: the mask
    id ``data_vocab``, the last id of the model vocabulary)."""
    return cfg.objective.for_vocab(data_vocab)


def build_run_model(cfg: RunConfig, data_vocab: int) -> torch.nn.Module:
    """A freshly initialised model for ``cfg`` (any family) with ``data_vocab`` tokenizer ids (plus the ids the
    objective adds)."""
    fields = dict(dataclasses.asdict(cfg.model), vocab_size=data_vocab + cfg.objective.added_ids)
    return build_model(family_of(cfg.model), match_params=False, **fields)


def read_run_config(run: str | Path) -> RunConfig:
    """The :class:`RunConfig` of run folder ``run`` (its ``config.json``)."""
    p = Path(run)
    if not (p / "config.json").exists():
        raise CheckpointError(f"{p} is not a dlmlab run directory (no config.json)")
    return load_json(RunConfig, p / "config.json", hint="the run directory is damaged: train it again")


def load_run(path: str | Path) -> tuple[torch.nn.Module, RunConfig, object]:
    """Model, config and tokenizer of a finished or partial ``dlmlab train`` run: ``path`` is the run
    folder (its latest checkpoint) or one of its ``checkpoints/step_N`` folders (that checkpoint); the
    model is what :func:`dlmlab.load` loads (``model.json``)."""
    from dlmlab.rundir.load import load, run_of

    p = Path(path)
    cfg = read_run_config(run_of(p))
    loaded = load(p)
    if loaded.tokenizer is None:
        raise CheckpointError(f"{run_of(p) / 'tokenizer.json'} is missing, so the run's text cannot be encoded; "
                              "copy the tokenizer.json of the run back into the folder")
    return loaded.model, cfg, loaded.tokenizer
