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

from dlmlab.objectives.schedule import LinearSchedule, NoiseSchedule, parse_schedule


def default_noise() -> NoiseSchedule:
    """The schedule of a run that names none: linear, default ``eps``."""
    return LinearSchedule()


def noise_to_data(schedule: NoiseSchedule) -> dict:
    """``{"name": ..., **fields}`` (JSON-ready) of a schedule."""
    return {"name": schedule.name, **dataclasses.asdict(schedule)}


def noise_from_data(data: Any, where: str = "noise") -> NoiseSchedule:
    """A schedule from ``{"name": ..., **fields}``, a bare name, or a schedule object: :func:`parse_schedule`
    (one-line :class:`~dlmlab.config.ConfigError` naming ``where`` on bad input)."""
    return parse_schedule(data, where)


__all__ = ["default_noise", "noise_from_data", "noise_to_data"]
