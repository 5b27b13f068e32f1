"""The model ``dlmlab train`` builds: its YAML ``model`` section read as :func:`~dlmlab.models.factory.build_model`
reads its keywords (through :func:`~dlmlab.models.factory.section_config`, the factory's one place for
defaults and parameter matching), so ``model: {family: F, **fields}`` and ``build_model(F, vocab_size=V,
**fields)`` are the same model; ``V`` is the tokenizer's vocabulary plus the ids the objective adds (the mask
token under mdlm).

The resolved config (every field explicit) is what the run records in ``config.json`` and ``model.json``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from dlmlab.config import read_text
from dlmlab.models.factory import matches_width, section_config


def model_section(config_path: str | Path) -> dict:
    """The ``model`` section of a run config file as written (``{}`` when it has none)."""
    data = yaml.safe_load(read_text(config_path, "config file")) or {}
    section = data.get("model") if isinstance(data, dict) else None
    return dict(section) if isinstance(section, dict) else {}


def _tokenizer_vocab(cfg, out: Path, resume: bool) -> int:
    """The run's tokenizer vocabulary: the saved one of a run that resumes, else the one it will fit."""
    from dlmlab.data import load_corpus, load_tokenizer
    from dlmlab.rundir.checkpoint import latest_checkpoint

    tok = out / "tokenizer.json"
    if resume and out.is_dir() and tok.is_file() and latest_checkpoint(out) is not None:
        return load_tokenizer(tok).vocab_size
    return load_corpus(cfg.data)[1].vocab_size  # deterministic: the run fits the same tokenizer


def as_factory_builds(cfg, config_path: str | Path, out: str | Path, resume: bool = True):
    """``cfg`` (a :class:`~dlmlab.training.lm.RunConfig` loaded from ``config_path``) with its model config
    replaced by what :func:`~dlmlab.models.factory.build_model` makes of the section's fields.  Only a width
    to match (a Mamba / Mamba-2 / LSTM / GRU section without ``d_inner`` / ``expand`` / ``hidden_size``)
    needs the vocabulary, so only then is the tokenizer read (or fit)."""
    from dlmlab.training.run_config import model_from_dict, model_to_dict

    section = model_section(config_path)
    if matches_width(section.get("family", "transformer"), section):
        from dlmlab.training.distributed import init_from_env  # under torchrun only rank 0 reads or fits it

        vocab = init_from_env().from_main(lambda: _tokenizer_vocab(cfg, Path(out), resume))
        vocab += cfg.objective.added_ids  # the ids the objective adds (the mask token)
    else:
        vocab = 1  # the factory's other defaults do not depend on the vocabulary
    resolved = model_to_dict(section_config(section, vocab))
    resolved["vocab_size"] = section.get("vocab_size", 0)  # 0: from the tokenizer, as before
    return dataclasses.replace(cfg, model=model_from_dict(resolved))
