"""An objective read back from a run's ``model.json``: :func:`objective_from_card` (the inverse of ``to_card``)."""

from __future__ import annotations

from dlmlab.errors import UserError
from dlmlab.objectives.ar import ARObjective
from dlmlab.objectives.given import GivenMaskObjective
from dlmlab.objectives.mdlm import MaskedDiffusionObjective
from dlmlab.objectives.prefix import PrefixDiffusionObjective
from dlmlab.objectives.tagging import TaggingObjective

OBJECTIVES: dict[str, type] = {c.name: c for c in (ARObjective, MaskedDiffusionObjective, GivenMaskObjective,
                                                   TaggingObjective, PrefixDiffusionObjective)}
# names the masked-diffusion objective had in older modules / other toolkits
OLD_OBJECTIVE_NAMES = {"dlm": "mdlm", "mdm": "mdlm"}


def check_objective_name(name: str | None, where: str = "objective") -> str | None:
    """``name`` if it names an objective (or is None); a one-line :class:`UserError` otherwise (an old name such
    as ``"dlm"`` / ``"mdm"`` names the one to use)."""
    if name is None or name in OBJECTIVES:
        return name
    if name in OLD_OBJECTIVE_NAMES:
        raise UserError(f"{where} {name!r} is an old name of masked diffusion; write {OLD_OBJECTIVE_NAMES[name]!r}")
    raise UserError(f"{where} {name!r} is not one of {list(OBJECTIVES)}")


def objective_from_card(card: dict, where: str = "model.json"):
    """The objective a card records (``{"objective": name, **its fields}``), ``None`` for a card of a run that
    named none; an unknown name or a bad field is a one-line :class:`UserError` naming ``where``.

    Cards written before objectives recorded every field load with the missing fields at their defaults
    (e.g. no ``noise``: the default linear schedule)."""
    name = check_objective_name(card.get("objective"), f"{where}: objective")
    return None if name is None else OBJECTIVES[name].from_card(card, where)


__all__ = ["OBJECTIVES", "OLD_OBJECTIVE_NAMES", "check_objective_name", "objective_from_card"]
