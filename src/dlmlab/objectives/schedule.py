"""Absorbing-mask noise schedules (MDLM, Sahoo et al. 2024): small classes shared by objectives and samplers.

A schedule gives ``alpha(t)``, the probability that a token is still clean at time ``t`` in [0, 1]
(``alpha(0) = 1``, decreasing); a token is masked with probability ``mask_prob(t) = 1 - alpha(t)``.
The continuous-time NELBO weight on a masked token's cross-entropy is
``elbo_weight(t) = -alpha'(t) / (1 - alpha(t))``, and training draws ``t`` from ``[t_min, 1]``
(antithetic by default) so the weight stays finite.

==============  ===========================================  ==============  ==========================
name            alpha(t)                                     weight          eps means
==============  ===========================================  ==============  ==========================
``linear``      ``1 - t``                                    ``1 / t``       t is drawn from [eps, 1]
``loglinear``   ``1 - (1 - eps) t`` (MDLM / SEDD log-linear)  ``1 / t``       alpha(1) = eps
``cosine``      ``eps + (1 - eps) cos(pi t / 2)`` (MDLM)     see the class   alpha(1) = eps
==============  ===========================================  ==============  ==========================

``loglinear`` and ``cosine`` draw ``t`` from ``[t_min, 1]``.  ``linear`` with its default ``eps`` is
the toolkit's historical schedule (the module functions :func:`alpha`, :func:`mask_prob` and
:func:`elbo_weight` are it, bit for bit).  Training draws times through a schedule (or the
:class:`~dlmlab.objectives.objective.MaskedDiffusionObjective` holding one), never a module function.

Samplers use the same classes: a sampler running time from 1 down to 0 in ``S`` equal steps
reveals, in expectation, the share :meth:`NoiseSchedule.clean_share` of the masked positions
after step ``s`` and, drawing (MDLM's ancestral sampler), each still-masked position at step ``j``
with probability :meth:`NoiseSchedule.reveal_prob`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from dlmlab.config import Config, ConfigError, from_dict, require
from dlmlab.errors import UserError

def uniform_times(batch: int, generator: torch.Generator | None = None, antithetic: bool = True) -> torch.Tensor:
    """u [B] uniform on [0, 1); antithetic (stratified: one uniform shifted by i/B) by default."""
    u = torch.rand(1 if antithetic else batch, generator=generator)
    if antithetic:
        u = (u + torch.arange(batch) / batch) % 1.0
    return u


def _cos(t):
    return torch.cos(t) if isinstance(t, torch.Tensor) else math.cos(t)


def _sin(t):
    return torch.sin(t) if isinstance(t, torch.Tensor) else math.sin(t)


@dataclass
class NoiseSchedule(Config):
    """Base class: subclasses define :meth:`alpha` and :meth:`alpha_prime`; ``eps`` is every schedule's field.

    Methods take a tensor ``t`` [...] (or a Python float) and return the same shape.
    """

    eps: float = 1e-3

    name = "base"

    def validate(self) -> None:
        require(0 <= self.eps < 1, f"noise schedule eps must be in [0, 1), got {self.eps}")

    def to_data(self) -> dict:
        """``{"name": ..., **fields}`` (JSON-ready): what :func:`parse_schedule` reads back (``model.json``'s
        ``noise``, a run config's ``noise`` section, ``DecodeConfig.noise`` as data)."""
        return {"name": self.name, **dataclasses.asdict(self)}

    # --- the schedule -------------------------------------------------------------------------
    def alpha(self, t):
        """Probability a token is clean at time ``t``."""
        raise NotImplementedError

    def alpha_prime(self, t):
        """d alpha / dt at ``t`` (<= 0)."""
        raise NotImplementedError

    def mask_prob(self, t):
        """Probability a token is masked at time ``t``: ``1 - alpha(t)``."""
        return 1.0 - self.alpha(t)

    def elbo_weight(self, t):
        """``-alpha'(t) / (1 - alpha(t))``: the NELBO weight on a masked token's cross-entropy at time ``t``."""
        return -self.alpha_prime(t) / (1.0 - self.alpha(t))

    @property
    def t_min(self) -> float:
        """Lower end of the training times ``t ~ U[t_min, 1]``."""
        return self.eps

    def sample_t(self, batch: int, generator: torch.Generator | None = None, antithetic: bool = True) -> torch.Tensor:
        """t [B] in [t_min, 1]; antithetic (stratified: one uniform shifted by i/B) sampling lowers the loss variance."""
        u = uniform_times(batch, generator, antithetic)
        lo = self.t_min
        return lo + (1.0 - lo) * u

    # --- what samplers use --------------------------------------------------------------------
    def clean_share(self, u: float) -> float:
        """Expected share of the initially masked positions revealed once time has gone from 1 down to ``1 - u``:
        ``(alpha(1 - u) - alpha(1)) / (alpha(0) - alpha(1))`` (0 at u=0, 1 at u=1)."""
        a1 = self.alpha(1.0)
        return (self.alpha(1.0 - u) - a1) / (self.alpha(0.0) - a1)

    def reveal_prob(self, step: int, steps: int) -> float:
        """Probability that a still-masked position is revealed at step ``step`` (0-based) of ``steps`` going from
        t=1 to t=0 in equal steps: ``(alpha(t_next) - alpha(t)) / (1 - alpha(t))`` (1 at the last step)."""
        if step >= steps - 1:
            return 1.0
        t, t_next = 1.0 - step / steps, 1.0 - (step + 1) / steps
        a, a_next = self.alpha(t), self.alpha(t_next)
        return (a_next - a) / (1.0 - a)


@dataclass
class LinearSchedule(NoiseSchedule):
    """``alpha(t) = 1 - t``, weight ``1 / t``; ``t`` is drawn from ``[eps, 1]`` (the toolkit's default)."""

    name = "linear"

    def alpha(self, t):
        return 1.0 - t

    def alpha_prime(self, t):
        return -1.0 + 0.0 * t

    def elbo_weight(self, t):
        return 1.0 / t

    def clean_share(self, u: float) -> float:
        return u

    def reveal_prob(self, step: int, steps: int) -> float:
        return 1.0 / (steps - step) if step < steps - 1 else 1.0


@dataclass
class _LowTimeSchedule(NoiseSchedule):
    """A schedule whose training times are drawn from ``[t_lo, 1]`` (its weight diverges at t = 0)."""

    t_lo: float = 1e-3

    def validate(self) -> None:
        super().validate()
        require(0 < self.t_lo < 1, f"noise schedule t_lo must be in (0, 1), got {self.t_lo}")

    @property
    def t_min(self) -> float:
        return self.t_lo


@dataclass
class LogLinearSchedule(_LowTimeSchedule):
    """``alpha(t) = 1 - (1 - eps) t``: total noise ``sigma(t) = -log(1 - (1 - eps) t)`` is log-linear (MDLM, SEDD);
    a token stays clean with probability ``eps`` at t=1.  Weight ``1 / t``; ``t`` is drawn from ``[t_min, 1]``."""

    name = "loglinear"

    def alpha(self, t):
        return 1.0 - (1.0 - self.eps) * t

    def alpha_prime(self, t):
        return -(1.0 - self.eps) + 0.0 * t


@dataclass
class CosineSchedule(_LowTimeSchedule):
    """``alpha(t) = eps + (1 - eps) cos(pi t / 2)`` (MDLM's cosine): few tokens masked at small t.

    Weight ``(pi / 2) sin(pi t / 2) / (1 - cos(pi t / 2))`` (about ``2 / t`` near 0); ``t`` is drawn
    from ``[t_min, 1]``.  A sampler following it reveals many positions first (:meth:`clean_share`
    is ``sin(pi u / 2)`` when eps = 0); the decoder's ``cosine`` count schedule is MaskGIT's,
    the reverse (``1 - cos(pi u / 2)``, few first), which is :meth:`mask_prob` at ``u`` with eps = 0.
    """

    name = "cosine"

    def alpha(self, t):
        return self.eps + (1.0 - self.eps) * _cos(math.pi / 2 * t)

    def alpha_prime(self, t):
        return -(1.0 - self.eps) * (math.pi / 2) * _sin(math.pi / 2 * t)

    def elbo_weight(self, t):
        # -alpha' / (1 - alpha) with the (1 - eps) factors cancelled (exact, and stable in float32)
        return (math.pi / 2) * _sin(math.pi / 2 * t) / (1.0 - _cos(math.pi / 2 * t))


SCHEDULES: dict[str, type[NoiseSchedule]] = {c.name: c for c in (LinearSchedule, LogLinearSchedule, CosineSchedule)}


def parse_schedule(value: Any, where: str = "noise") -> NoiseSchedule:
    """The one parser of a noise schedule: a :class:`NoiseSchedule` (kept as it is), a bare name (``linear``,
    ``loglinear``, ``cosine``: default fields) or a mapping ``{"name": ..., **fields}`` (a run config's
    ``noise`` section, ``model.json``'s ``noise``, ``DecodeConfig.noise``); :meth:`NoiseSchedule.to_data` writes
    that mapping.

    Anything else, an unknown name or field, or a bad value is a one-line :class:`ConfigError` naming
    ``where`` and the offending name or field."""
    if isinstance(value, NoiseSchedule):
        return value
    if isinstance(value, str):
        if value not in SCHEDULES:
            raise ConfigError(f"{where}: {value!r} is not one of {list(SCHEDULES)}")
        value = {"name": value}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a schedule name or a mapping with a name and its fields "
                          f"(or a NoiseSchedule), got {type(value).__name__}")
    fields = dict(value)
    name = fields.pop("name", None)
    if name is None:
        raise ConfigError(f"{where}.name is missing; give one of {', '.join(SCHEDULES)}")
    if not isinstance(name, str) or name not in SCHEDULES:
        raise ConfigError(f"{where}.name: {name!r} is not one of {list(SCHEDULES)}")
    try:
        return from_dict(SCHEDULES[name], fields, where)
    except ConfigError as e:
        msg = str(e)
        if msg.startswith("unknown field") and "(allowed: " in msg:
            raise ConfigError(msg.replace("(allowed: ", f"(allowed for noise {name}: name, ", 1)) from None
        if not msg.startswith((f"{where}.", f"{where}:")):
            msg = f"{where}: {msg}"
        raise ConfigError(msg) from None


def get_schedule(schedule: "str | NoiseSchedule | None" = None, **fields) -> NoiseSchedule:
    """A schedule by registry name (``linear``, ``loglinear``, ``cosine``) with config ``fields``, or the
    instance given (None: the default linear schedule); parsed by :func:`parse_schedule`."""
    if schedule is None:
        schedule = "linear"
    if fields:
        if not isinstance(schedule, str):
            raise UserError("give either a schedule instance or a name with fields, not both")
        if schedule in SCHEDULES:
            schedule = {"name": schedule, **fields}
    return parse_schedule(schedule, "noise")


DEFAULT = LinearSchedule()



# --- the historical module functions (the default linear schedule) ---------------------------------
def alpha(t: torch.Tensor) -> torch.Tensor:
    return DEFAULT.alpha(t)


def mask_prob(t: torch.Tensor) -> torch.Tensor:
    return DEFAULT.mask_prob(t)


def elbo_weight(t: torch.Tensor) -> torch.Tensor:
    """-alpha'(t) / (1 - alpha(t)) for the linear schedule = 1 / t."""
    return DEFAULT.elbo_weight(t)

