"""What a saved model is: ``model.json`` beside its weights, so one call can load it again.

Every run folder (``dlmlab train``, :func:`dlmlab.training.train`, :func:`~dlmlab.training.lm.run_training`) of a
dlmlab model family and every checkpoint folder in it holds ``model.json`` (and ``tokenizer.json`` when the run
had one): the model's family and config, and the training objective as it writes itself
(:meth:`~dlmlab.objectives.objective.Objective.to_card`)::

    {"format": "dlmlab-model", "version": 1, "family": "mamba",
     "config": {...every field of the model's config, vocab_size included...},
     "objective": "mdlm", "mask_id": 65, "noise": {"name": "loglinear", "eps": 0.001, "t_lo": 0.001},
     "t_range": [0.02, 0.5], "pad_id": null, "shift_logits": false, "bidirectional": false}

``objective`` is the objective's name (``"ar"``, ``"mdlm"``, ``"given_mask"``, ...; ``null`` for an objective
that does not write itself), followed by its fields; ``mask_id`` is the mask token (``null`` when there is
none); ``shift_logits`` says whether the logits at position ``i`` predict token ``i + 1`` (AR) or token ``i``
itself (masked diffusion).  :func:`card_objective` reads the objective back
(:func:`~dlmlab.objectives.objective_from_card`); cards written before objectives recorded every field (no
``pad_id``, no ``noise``: the default linear schedule) load the same way.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from dlmlab.errors import UserError
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.models.protocol import FAMILIES
from dlmlab.objectives.card import objective_class, objective_from_card

CARD_NAME = "model.json"
TOKENIZER_NAME = "tokenizer.json"
CARD_FORMAT = "dlmlab-model"


def family_of(cfg: Any) -> str:
    """Family name (``transformer``, ``mamba``, ``mamba2``, ``lstm``, ``gru``) of a model config object."""
    family = getattr(cfg, "family", None) if dataclasses.is_dataclass(cfg) else None
    if family not in FAMILIES:
        raise UserError(f"{type(cfg).__name__} is not the config of a dlmlab model family ({', '.join(FAMILIES)})")
    return family


def is_bidirectional(family: str, config: dict) -> bool:
    """Whether every position sees the whole sequence (only a transformer without a causal mask)."""
    return family == "transformer" and config.get("attn_mask", "causal") == "bidirectional"


def is_family_model(model: Any) -> bool:
    """Whether ``model`` is a dlmlab model family (a ``cfg`` of a known family), so it can be saved loadable."""
    cfg = getattr(model, "cfg", None)
    return cfg is not None and dataclasses.is_dataclass(cfg) and getattr(cfg, "family", None) in FAMILIES


def model_card(model: Any, objective: Any = None) -> dict:
    """The ``model.json`` content for a toolkit ``model`` (it must have a ``cfg`` of a known family) trained with
    ``objective`` (its ``to_card()`` is recorded; an objective without one, or None, records ``objective`` null).

    The objective's mask id must be a token of the model's vocabulary."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or not dataclasses.is_dataclass(cfg):
        raise UserError(f"{type(model).__name__} has no model config (.cfg); only dlmlab model families can be saved "
                        "for dlmlab.load")
    family = family_of(cfg)
    config = {k: (int(v) if isinstance(v, int) and not isinstance(v, bool) else v)
              for k, v in dataclasses.asdict(cfg).items()}
    vocab = int(config.get("vocab_size", 0))
    to_card = getattr(objective, "to_card", None)
    written = dict(to_card()) if to_card is not None else {"objective": None}
    written.setdefault("mask_id", None)
    mask_id = written["mask_id"]
    if mask_id is not None and not (isinstance(mask_id, int) and 0 <= mask_id < vocab):
        raise UserError(f"mask_id must be a token id in [0, {vocab}), got {mask_id!r}")
    if mask_id is None and getattr(objective, "added_ids", 0):
        raise UserError(f"the {written['objective']!r} objective has no mask_id yet; give one, or call "
                        "objective.for_vocab(tokenizer vocabulary) before training")
    card = {"format": CARD_FORMAT, "version": 1, "family": family, "config": config, **written,
            "shift_logits": bool(getattr(objective, "shift_logits", True)),
            "bidirectional": is_bidirectional(family, config)}
    return card


def card_objective(card: dict, where: str = CARD_NAME):
    """The objective the card records (:func:`~dlmlab.objectives.objective_from_card`), ``None`` when it names
    none; a bad one is a one-line :class:`UserError` naming ``where``."""
    return objective_from_card(card, where)


def card_text(card: dict) -> str:
    return strict_json(card, indent=1) + "\n"


def write_card(folder: str | Path, card: dict, tokenizer_json: str | None = None) -> None:
    """Write ``folder/model.json`` (and ``folder/tokenizer.json``), each in one step."""
    folder = Path(folder)
    atomic_write_text(folder / CARD_NAME, card_text(card))
    if tokenizer_json is not None:
        atomic_write_text(folder / TOKENIZER_NAME, tokenizer_json)


def read_card(folder: str | Path) -> dict | None:
    """``folder/model.json`` as a dict (``None`` when there is none); a damaged one, or one whose fields have
    the wrong type, is a one-line error naming the file and the field (:func:`check_card`)."""
    path = Path(folder) / CARD_NAME
    if not path.is_file():
        return None
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is unreadable or not JSON ({e}); train the run again") from None
    check_card(card, str(path))
    return card


def _token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_card(card: Any, where: str = CARD_NAME) -> None:
    """Check a card's fields as a config file's are checked: one-line :class:`UserError` naming ``where`` and the
    field (the format, family and config; ``objective`` a registered name or null; ``mask_id`` a token of the
    model's vocabulary or null; ``shift_logits`` / ``bidirectional`` true or false; the objective's own fields)."""
    ok = (isinstance(card, dict) and card.get("format") == CARD_FORMAT and card.get("family") in FAMILIES
          and isinstance(card.get("config"), dict))
    if not ok:
        raise UserError(f"{where} is not a dlmlab model card (needs format {CARD_FORMAT!r}, a family in "
                        f"{list(FAMILIES)} and a config)")
    for key in ("shift_logits", "bidirectional"):
        if key in card and not isinstance(card[key], bool):
            raise UserError(f"{where}: {key} must be true or false, got {card[key]!r}")
    vocab = card["config"].get("vocab_size")
    if not _token_id(vocab) or vocab < 1:
        raise UserError(f"{where}: config.vocab_size must be a positive integer, got {vocab!r}")
    mask_id = card.get("mask_id")
    if mask_id is not None and not (_token_id(mask_id) and 0 <= mask_id < vocab):
        raise UserError(f"{where}: mask_id must be a token id in [0, {vocab}) (config.vocab_size) or null, "
                        f"got {mask_id!r}")
    name = card.get("objective")
    if name is None:
        return
    if not isinstance(name, str):
        raise UserError(f"{where}: objective must be an objective's name (a string) or null, got "
                        f"{type(name).__name__} {name!r}")
    if objective_class(name, f"{where}: objective").added_ids and mask_id is None:
        raise UserError(f"{where}: mask_id is null, and objective {name!r} needs its mask token")
    objective_from_card(card, where)  # the objective's own fields


def build_from_card(card: dict):
    """A freshly initialised model of the card's family and config (load the weights into it next)."""
    from dlmlab.config import ConfigError
    from dlmlab.models.factory import build_model

    config = dict(card["config"])
    family = card["family"]
    if family in ("lstm", "gru"):
        config["cell"] = family
    try:
        return build_model(family, match_params=False, **config)
    except (ConfigError, TypeError) as e:
        raise UserError(f"the model config in {CARD_NAME} does not build a {family}: {e}") from None
