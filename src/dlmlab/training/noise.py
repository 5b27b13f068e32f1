"""A training noise schedule as plain data: a run config's ``noise`` section and ``model.json``'s ``noise``.

In YAML (the schedule's name and its fields, :mod:`dlmlab.objectives.schedule`)::

    objective: mdlm
    noise: {name: loglinear, eps: 1.0e-3}     # or just ``noise: cosine`` (default fields)

As data the schedule is ``{"name": ..., **fields}``.  No ``noise`` means the default schedule,
:class:`~dlmlab.objectives.schedule.LinearSchedule` with its default ``eps`` (what every run used before
runs could choose one).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dlmlab.config import ConfigError, from_dict
from dlmlab.objectives.schedule import SCHEDULES, LinearSchedule, NoiseSchedule


def default_noise() -> NoiseSchedule:
    """The schedule of a run that names none: linear, default ``eps``."""
    return LinearSchedule()


def noise_to_data(schedule: NoiseSchedule) -> dict:
    """``{"name": ..., **fields}`` (JSON-ready) of a schedule."""
    return {"name": schedule.name, **dataclasses.asdict(schedule)}


def noise_from_data(data: Any, where: str = "noise") -> NoiseSchedule:
    """A schedule from ``{"name": ..., **fields}``, a bare name, or a schedule object.

    Anything else, an unknown name or field, or a bad value is a one-line :class:`ConfigError`
    naming ``where`` and the offending name or field."""
    if isinstance(data, NoiseSchedule):
        return data
    if isinstance(data, str):
        data = {"name": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a schedule name or a mapping with a name and its fields, "
                          f"got {type(data).__name__}")
    fields = dict(data)
    name = fields.pop("name", None)
    if name is None:
        raise ConfigError(f"{where}.name is missing; give one of {', '.join(SCHEDULES)}")
    if name not in SCHEDULES:
        raise ConfigError(f"{where}.name: {name!r} is not one of {list(SCHEDULES)}")
    try:
        return from_dict(SCHEDULES[name], fields, where)
    except ConfigError as e:
        msg = str(e)
        if msg.startswith("unknown field") and "(allowed: " in msg:
            raise ConfigError(msg.replace("(allowed: ", f"(allowed for noise {name}: name, ", 1)) from None
        if not msg.startswith(where):
            msg = f"{where}: {msg}"
        raise ConfigError(msg) from None


__all__ = ["default_noise", "noise_from_data", "noise_to_data"]
