"""The objective registry: names -> objective classes, and an objective read back from its card.

One schema describes an objective wherever it is written: its card, ``to_card()``, the objective's fields
beside its name.  ``model.json`` holds the card flat beside the model (``"objective": "mdlm", "mask_id":
65, "noise": {...}, ...``); a run config (YAML, ``config.json``) holds it as the ``objective`` section
(``{name: mdlm, noise: loglinear, t_range: [0.02, 0.5], pad_id: null}``, or the bare name as shorthand),
without the ids the objective adds to the vocabulary (the mask token), which the run assigns
(``for_vocab``).

:func:`register_objective` adds a user's objective class (as Hugging Face's ``AutoConfig.register``), so a
run trained with it saves, and loads again with :func:`dlmlab.load`, like the built-in ones.  This module
is the only place that maps an objective's name to code.
"""

from __future__ import annotations

from typing import Any

from dlmlab.config import ConfigError
from dlmlab.errors import UserError
from dlmlab.objectives.ar import ARObjective
from dlmlab.objectives.given import GivenMaskObjective
from dlmlab.objectives.mdlm import MaskedDiffusionObjective
from dlmlab.objectives.prefix import PrefixDiffusionObjective
from dlmlab.objectives.tagging import TaggingObjective

OBJECTIVES: dict[str, type] = {}
# names the masked-diffusion objective had in older modules / other toolkits (a Hugging Face folder's "mdm")
OLD_OBJECTIVE_NAMES = {"dlm": "mdlm", "mdm": "mdlm"}
# what a registered class must offer (the base class CardObjective gives every one but these)
_REQUIRED = ("make_batch", "loss", "to_card", "from_card", "for_vocab", "window", "evaluate")


def register_objective(name: str, cls: type) -> type:
    """Make objective class ``cls`` known by ``name`` (its ``name`` attribute), so that a card naming it
    (``model.json``, a run config's ``objective`` section) builds it with ``cls.from_card(card, where)``.

    ``cls`` subclasses :class:`~dlmlab.objectives.objective.CardObjective` (or offers what it does); a name
    taken by another class is a one-line error.  Returns ``cls`` (so it may decorate the class)."""
    if not isinstance(name, str) or not name:
        raise UserError(f"register_objective: the name must be a non-empty string, got {name!r}")
    if getattr(cls, "name", None) != name:
        raise UserError(f"register_objective({name!r}, {cls.__name__}): the class's name attribute is "
                        f"{getattr(cls, 'name', None)!r}; set name = {name!r} on the class")
    missing = [m for m in _REQUIRED if not callable(getattr(cls, m, None))]
    if missing:
        raise UserError(f"register_objective({name!r}, {cls.__name__}): the class lacks {', '.join(missing)} "
                        "(subclass dlmlab.objectives.CardObjective)")
    if name in OLD_OBJECTIVE_NAMES or OBJECTIVES.get(name, cls) is not cls:
        raise UserError(f"register_objective: the name {name!r} is taken (by "
                        f"{getattr(OBJECTIVES.get(name), '__name__', 'an old name of mdlm')})")
    OBJECTIVES[name] = cls
    return cls


for _cls in (ARObjective, MaskedDiffusionObjective, GivenMaskObjective, TaggingObjective, PrefixDiffusionObjective):
    register_objective(_cls.name, _cls)


def objective_class(name: Any, where: str = "objective") -> type:
    """The class registered as ``name``; a one-line :class:`UserError` naming ``where`` otherwise (an old name
    such as ``"dlm"`` names the one to use)."""
    if not isinstance(name, str):
        raise UserError(f"{where} must be an objective's name (a string), got {type(name).__name__} {name!r}")
    if name in OBJECTIVES:
        return OBJECTIVES[name]
    if name in OLD_OBJECTIVE_NAMES:
        raise UserError(f"{where} {name!r} is an old name of masked diffusion; write {OLD_OBJECTIVE_NAMES[name]!r}")
    raise UserError(f"{where} {name!r} is not one of {list(OBJECTIVES)} (a user's objective is added with "
                    "dlmlab.objectives.register_objective)")


def check_objective_name(name: Any, where: str = "objective") -> str | None:
    """``name`` if it names a registered objective (or is None); a one-line :class:`UserError` otherwise."""
    if name is not None:
        objective_class(name, where)
    return name


def objective_from_card(card: dict, where: str = "model.json"):
    """The objective a card records (``{"objective": name, **its fields}``), ``None`` for a card of a run that
    named none; an unknown name or a bad field is a one-line :class:`UserError` naming ``where``.

    Cards written before objectives recorded every field load with the missing fields at their defaults
    (e.g. no ``noise``: the default linear schedule)."""
    name = card.get("objective")
    if name is None:
        return None
    cls = objective_class(name, f"{where}: objective")
    try:
        return cls.from_card(card, where)
    except UserError:
        raise
    except (TypeError, ValueError) as e:
        raise UserError(f"{where}: objective {name!r}: {e}") from None


def objective_from_section(section: Any, where: str = "objective"):
    """A run config's ``objective`` section (a name, or ``{name: ..., **fields}``) -> the objective, with
    the ids it adds still unassigned (``for_vocab`` assigns them); an objective object passes through."""
    if callable(getattr(section, "to_card", None)):
        return section
    bare = isinstance(section, str)
    if bare:
        section = {"name": section}
    old = section.get("name") if isinstance(section, dict) else None
    if isinstance(old, str) and old in OLD_OBJECTIVE_NAMES:
        key = where if bare else f"{where}.name"
        raise ConfigError(f"{key}: {old!r} is an old name of masked diffusion; write {key}: {OLD_OBJECTIVE_NAMES[old]}")
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: expected an objective's name or a mapping {{name: ..., ...}}, got "
                          f"{type(section).__name__}")
    data = dict(section)
    if "objective" in data:
        raise ConfigError(f"{where}: write the objective's name as {where}.name, not {where}.objective")
    if "name" not in data:
        raise ConfigError(f"{where}.name is missing (one of {list(OBJECTIVES)})")
    name = data.pop("name")
    if not isinstance(name, str) or name not in OBJECTIVES:
        raise ConfigError(f"{where if bare else f'{where}.name'}: {name!r} is not one of {list(OBJECTIVES)} (a "
                          "user's objective is added with dlmlab.objectives.register_objective)")
    cls = OBJECTIVES[name]
    if cls.added_ids and data.get("mask_id") is not None:
        raise ConfigError(f"{where}.mask_id: the run assigns it (the id just past the tokenizer's); remove it")
    try:
        obj = cls.from_card({"objective": name, **data}, where)
    except ConfigError:
        raise
    except UserError as e:
        raise ConfigError(str(e)) from None
    known = set(obj.to_card()) - {"objective"}
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        raise ConfigError(f"unknown field '{where}.{unknown[0]}' (allowed for objective {name}: name, "
                          f"{', '.join(sorted(known - {'mask_id'} if cls.added_ids else known))})")
    return obj


def objective_section(objective) -> dict:
    """The inverse of :func:`objective_from_section`: ``{"name": ..., **fields}`` (no added ids)."""
    card = dict(objective.to_card())
    name = card.pop("objective")
    if getattr(objective, "added_ids", 0):
        card.pop("mask_id", None)
    return {"name": name, **card}


__all__ = ["OBJECTIVES", "OLD_OBJECTIVE_NAMES", "register_objective", "objective_class", "check_objective_name",
           "objective_from_card", "objective_from_section", "objective_section"]
