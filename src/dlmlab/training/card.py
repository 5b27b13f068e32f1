"""What a saved model is: ``model.json`` beside its weights, so one call can load it again.

Every run folder (``dlmlab train``, :func:`dlmlab.training.train`, :func:`run_training`) and every
checkpoint folder in it holds ``model.json`` (and ``tokenizer.json`` when the run had one)::

    {"format": "dlmlab-model", "version": 1, "family": "mamba",
     "config": {...every field of the model's config, vocab_size included...},
     "objective": "mdlm", "mask_id": 65, "shift_logits": false, "bidirectional": false,
     "noise": {"name": "loglinear", "eps": 0.001, "t_lo": 0.001}, "t_range": [0.02, 0.5]}

``objective`` is ``"ar"``, ``"mdlm"`` or ``null`` (a :func:`~dlmlab.training.train` call that was not
told); ``mask_id`` is the masked-diffusion mask token (``null`` for AR); ``shift_logits`` says whether
the logits at position ``i`` predict token ``i + 1`` (AR) or token ``i`` itself (masked diffusion).
``noise`` (mdlm only, optional) is the noise schedule the model was trained with
(:mod:`dlmlab.training.noise`); a card without one means the default linear schedule.  ``t_range``
(mdlm only, optional) is ``[lo, hi]`` when training drew the mask times uniformly on that range rather than
from the schedule on ``[t_min, 1]`` (the induction study's narrower mask rates).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from dlmlab.errors import UserError
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.models.protocol import FAMILIES

CARD_NAME = "model.json"
TOKENIZER_NAME = "tokenizer.json"
CARD_FORMAT = "dlmlab-model"
OBJECTIVES = ("ar", "mdlm")
# names the masked-diffusion objective had in older modules / other toolkits
OLD_OBJECTIVE_NAMES = {"dlm": "mdlm", "mdm": "mdlm"}


def check_objective(name: str | None) -> str | None:
    """``name`` if it is ``"ar"``, ``"mdlm"`` or ``None``; a one-line :class:`UserError` otherwise
    (an old name such as ``"dlm"`` / ``"mdm"`` names the one to use)."""
    if name is None or name in OBJECTIVES:
        return name
    if name in OLD_OBJECTIVE_NAMES:
        raise UserError(f"objective {name!r} is an old name of masked diffusion; write objective "
                        f"{OLD_OBJECTIVE_NAMES[name]!r}")
    raise UserError(f"objective {name!r} is not one of {list(OBJECTIVES)}")


def family_of(cfg: Any) -> str:
    """Family name (``transformer``, ``mamba``, ``mamba2``, ``lstm``, ``gru``) of a model config object."""
    family = getattr(cfg, "family", None) if dataclasses.is_dataclass(cfg) else None
    if family not in FAMILIES:
        raise UserError(f"{type(cfg).__name__} is not the config of a dlmlab model family ({', '.join(FAMILIES)})")
    return family


def is_bidirectional(family: str, config: dict) -> bool:
    """Whether every position sees the whole sequence (only a transformer without a causal mask)."""
    return family == "transformer" and config.get("attn_mask", "causal") == "bidirectional"


def model_card(model: Any, objective: str | None = None, mask_id: int | None = None, noise: Any = None,
               t_range: tuple[float, float] | None = None) -> dict:
    """The ``model.json`` content for a toolkit ``model`` (it must have a ``cfg`` of a known family).

    ``noise``: the :class:`~dlmlab.objectives.schedule.NoiseSchedule` of an mdlm model (or its data,
    ``{"name": ..., **fields}``); left out of the card when ``None``.  ``t_range``: ``(lo, hi)`` of an mdlm
    model whose mask times were drawn uniformly on that range; left out when ``None``."""
    objective = check_objective(objective)
    cfg = getattr(model, "cfg", None)
    if cfg is None or not dataclasses.is_dataclass(cfg):
        raise UserError(f"{type(model).__name__} has no model config (.cfg); only dlmlab model families can be saved "
                        "for dlmlab.load")
    family = family_of(cfg)
    config = {k: (int(v) if isinstance(v, int) and not isinstance(v, bool) else v)
              for k, v in dataclasses.asdict(cfg).items()}
    vocab = int(config.get("vocab_size", 0))
    if objective == "mdlm" and mask_id is None:
        raise UserError("objective 'mdlm' needs its mask_id (the mask token's id) to be saved with the model")
    if mask_id is not None and not (isinstance(mask_id, int) and 0 <= mask_id < vocab):
        raise UserError(f"mask_id must be a token id in [0, {vocab}), got {mask_id!r}")
    card = {"format": CARD_FORMAT, "version": 1, "family": family, "config": config, "objective": objective,
            "mask_id": None if mask_id is None else int(mask_id), "shift_logits": objective != "mdlm",
            "bidirectional": is_bidirectional(family, config)}
    if noise is not None:
        from dlmlab.training.noise import noise_from_data, noise_to_data

        if objective != "mdlm":
            raise UserError(f"a noise schedule belongs to objective 'mdlm', not {objective!r}")
        card["noise"] = noise_to_data(noise_from_data(noise))
    if t_range is not None:
        card["t_range"] = check_t_range(t_range, objective)
    return card


def check_t_range(t_range: Any, objective: str | None = "mdlm", where: str = "t_range") -> list[float]:
    """``[lo, hi]`` with ``0 <= lo < hi <= 1`` of an mdlm model; a one-line :class:`UserError` otherwise."""
    if objective != "mdlm":
        raise UserError(f"a mask-time range belongs to objective 'mdlm', not {objective!r}")
    try:
        lo, hi = (float(v) for v in t_range)
    except (TypeError, ValueError):
        raise UserError(f"{where} must be two numbers [lo, hi], got {t_range!r}") from None
    if not 0.0 <= lo < hi <= 1.0:
        raise UserError(f"{where} must satisfy 0 <= lo < hi <= 1, got {[lo, hi]}")
    return [lo, hi]


def card_t_range(card: dict, where: str = CARD_NAME) -> tuple[float, float] | None:
    """The card's mask-time range ``(lo, hi)``, ``None`` when it records none (bad: a one-line error)."""
    if card.get("t_range") is None:
        return None
    return tuple(check_t_range(card["t_range"], card.get("objective"), f"{where}: t_range"))


def card_noise(card: dict, where: str = CARD_NAME):
    """The card's noise schedule (a :class:`~dlmlab.objectives.schedule.NoiseSchedule`), ``None`` when it
    records none; a bad one is a one-line :class:`UserError` naming ``where``."""
    if card.get("noise") is None:
        return None
    from dlmlab.training.noise import noise_from_data

    return noise_from_data(card["noise"], f"{where}: noise")


def card_text(card: dict) -> str:
    return strict_json(card, indent=1) + "\n"


def write_card(folder: str | Path, card: dict, tokenizer_json: str | None = None) -> None:
    """Write ``folder/model.json`` (and ``folder/tokenizer.json``), each in one step."""
    folder = Path(folder)
    atomic_write_text(folder / CARD_NAME, card_text(card))
    if tokenizer_json is not None:
        atomic_write_text(folder / TOKENIZER_NAME, tokenizer_json)


def read_card(folder: str | Path) -> dict | None:
    """``folder/model.json`` as a dict (``None`` when there is none); a damaged one is a one-line error."""
    path = Path(folder) / CARD_NAME
    if not path.is_file():
        return None
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is unreadable or not JSON ({e}); train the run again") from None
    ok = (isinstance(card, dict) and card.get("format") == CARD_FORMAT and card.get("family") in FAMILIES
          and isinstance(card.get("config"), dict))
    if not ok:
        raise UserError(f"{path} is not a dlmlab model card (needs format {CARD_FORMAT!r}, a family in "
                        f"{list(FAMILIES)} and a config)")
    check_objective(card.get("objective"))
    card_noise(card, str(path))
    return card


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
