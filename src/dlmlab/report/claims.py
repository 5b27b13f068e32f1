"""Claims: a statement checked against measurements, reported with one of three verdicts.

* ``reproduced``: the measurement beats its control (an interval excludes 0 on the study's side, or the
  claim's fixed test passes).  This is exactly the old ``holds = True``.
* ``contradicted``: the measurement points the other way (an interval excludes 0 on the other side), or
  the mechanism the claim names is absent while its preconditions hold.
* ``inconclusive``, with a ``reason``:

  - ``underpowered``: the interval spans 0 (or the claim's level) and also includes the study's reported
    effect (or the study reports none); more seeds / items could decide it;
  - ``effect_excluded``: the interval spans 0 but excludes the study's reported effect: whatever effect
    there is at this scale is smaller than the study's, and more seeds would not recover the study's;
  - ``scale``: a single-seed mechanism measurement points the study's way (it beats its control, or sits on
    the right side of it) but falls short of the study's fixed level: the value and its control are shown;
  - ``precondition``: the model never learned the task the claim is about (e.g. accuracy at chance), so
    there is nothing to test;
  - ``not_run``: the preset did not run what the claim needs (``holds`` is ``None``);
  - ``unjudged``: made by code that gave no verdict, or read from a results.json written before verdicts.

``detail`` is an optional short free text (which part decided the verdict).  ``holds`` is derived:
``True`` for reproduced, ``None`` when the claim could not be evaluated (``evaluated`` False: always for
``not_run``, and for a precondition failure that left nothing to evaluate), ``False`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

Verdict = Literal["reproduced", "contradicted", "inconclusive"]
VERDICTS = ("reproduced", "contradicted", "inconclusive")
REASONS = ("underpowered", "effect_excluded", "scale", "precondition", "not_run", "unjudged")
#: a model "learned" a task when its accuracy is at least this far from chance to perfect (0.9: 90% of the way)
LEARNED_FRACTION = 0.9
#: significance level of a test against a random control (one-sided permutation p-value)
CONTROL_ALPHA = 0.05


@dataclass(frozen=True)
class Judgement:
    """A verdict and, for ``inconclusive``, why (one of :data:`REASONS`); ``detail``: short free text."""

    verdict: Verdict
    reason: str | None = None
    detail: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if self.verdict == "inconclusive":
            if self.reason not in REASONS:
                raise ValueError(f"an inconclusive verdict needs a reason in {REASONS}, got {self.reason!r}")
        elif self.reason is not None:
            raise ValueError(f"a {self.verdict} verdict has no reason, got {self.reason!r}")
        if not isinstance(self.detail, str):
            raise ValueError(f"detail must be a string, got {type(self.detail).__name__}")

    def label(self) -> str:
        """``reproduced`` / ``contradicted`` / ``inconclusive (underpowered)``."""
        return self.verdict if self.reason is None else f"{self.verdict} ({self.reason.replace('_', ' ')})"


REPRODUCED = Judgement("reproduced")


def contradicted(detail: str = "") -> Judgement:
    return Judgement("contradicted", None, detail)


def underpowered(detail: str = "") -> Judgement:
    return Judgement("inconclusive", "underpowered", detail)


def precondition_failed(detail: str = "") -> Judgement:
    return Judgement("inconclusive", "precondition", detail)


def not_run(detail: str = "") -> Judgement:
    return Judgement("inconclusive", "not_run", detail)


def effect_excluded(detail: str = "") -> Judgement:
    return Judgement("inconclusive", "effect_excluded", detail)


def short_of_scale(detail: str = "") -> Judgement:
    """Inconclusive / ``scale``: the measurement points the study's way but falls short of its level."""
    return Judgement("inconclusive", "scale", detail)


def learned_level(chance: float, fraction: float = LEARNED_FRACTION) -> float:
    """The accuracy that counts as having learned a task with chance level ``chance``:
    ``chance + fraction * (1 - chance)`` (0.9 of the way from chance to perfect by default)."""
    if not 0 <= chance < 1 or not 0 < fraction <= 1:
        raise ValueError(f"need 0 <= chance < 1 and 0 < fraction <= 1, got {chance}, {fraction}")
    return chance + fraction * (1 - chance)


def learned(acc: float, chance: float, what: str = "", fraction: float = LEARNED_FRACTION) -> Judgement | None:
    """``None`` when ``acc`` reaches :func:`learned_level`, else a precondition failure naming both numbers."""
    need = learned_level(chance, fraction)
    ok = math.isfinite(float(acc)) and acc >= need
    return precondition(ok, f"{what + ' ' if what else ''}accuracy {float(acc):.3f} < learned level {need:.3f} "
                            f"(chance {chance:.3f})")


def verdict_from_interval(lo: float, hi: float, side: int = +1, level: float = 0.0, what: str = "",
                          study_effect: float | None = None, n: int | None = None) -> Judgement:
    """Verdict of a claim "the value lies above ``level``" (``side=+1``) or "below ``level``" (``side=-1``) from
    its 95% interval [lo, hi]: wholly on the claim's side (strictly) -> reproduced; wholly on the other side
    (strictly) -> contradicted; touching or spanning ``level`` (or NaN) -> inconclusive: ``effect_excluded``
    when ``study_effect`` (the study's reported value of the same quantity) lies outside the interval,
    else ``underpowered``.  ``what`` names the quantity and ``n`` the seed count in the detail."""
    if side not in (1, -1):
        raise ValueError(f"side must be +1 or -1, got {side}")
    name = f"{what} " if what else ""
    iv = f"{name}[{lo:.3g}, {hi:.3g}]" + (f" (n={n})" if n is not None else "")
    if any(not math.isfinite(float(x)) for x in (lo, hi)):
        return underpowered(f"{name}interval undefined (no finite values)")
    if lo > hi:
        raise ValueError(f"interval lower end {lo} is above its upper end {hi}")
    above, below = lo > level, hi < level
    if (above and side > 0) or (below and side < 0):
        return REPRODUCED
    if above or below:
        return contradicted(f"{iv} {'above' if above else 'below'} {level:g}")
    if study_effect is not None and math.isfinite(float(study_effect)) and not lo <= study_effect <= hi:
        return effect_excluded(f"{iv} spans {level:g} and excludes the study's {study_effect:.3g}")
    return underpowered(f"{iv} spans {level:g}")


def interval_verdict(iv, side: int = +1, level: float = 0.0, what: str = "",
                     study_effect: float | None = None) -> Judgement:
    """:func:`verdict_from_interval` of an :class:`~dlmlab.report.intervals.Interval` (its seed count in the
    detail); an interval of fewer than two values is inconclusive / underpowered."""
    if iv.n < 2:
        return underpowered(f"{what + ' ' if what else ''}{iv.mean:.3g} from n={iv.n}: no interval")
    return verdict_from_interval(iv.lo, iv.hi, side, level, what, study_effect, n=iv.n)


def verdict_from_control(test, what: str = "", alpha: float = CONTROL_ALPHA) -> Judgement:
    """Verdict of "the value beats its random control" from a :class:`~dlmlab.report.intervals.ControlTest`:
    p <= ``alpha`` -> reproduced; the value no better than the control's median (p > 0.5) -> contradicted;
    in between (better than most draws, not significantly) -> inconclusive / underpowered.  A measure that
    neither the value nor any draw moved (every draw equal to the value) cannot be judged: inconclusive /
    precondition."""
    name = f"{what}: " if what else ""
    if not math.isfinite(test.p):
        return underpowered(f"{name}no finite value")
    if test.degenerate():
        return precondition_failed(f"{name}the measure is {test.value:.3g} under every one of the {test.n} "
                                   "random draws and the tested one: nothing moves it")
    if test.p <= alpha:
        return REPRODUCED
    if test.p > 0.5:
        return contradicted(f"{name}{test.fmt()}")
    return underpowered(f"{name}{test.fmt()}")


def precondition(ok: bool, detail: str = "") -> Judgement | None:
    """``None`` when the precondition holds, else an inconclusive / precondition verdict with ``detail``."""
    return None if ok else precondition_failed(detail)


def combine(parts: Iterable[Judgement]) -> Judgement:
    """Verdict of a claim that needs every part: all reproduced -> reproduced; any contradicted ->
    contradicted (one counterexample whose preconditions hold); else inconclusive, ``precondition``
    before ``effect_excluded`` before ``scale`` before ``underpowered`` before ``not_run``; details of the
    deciding parts joined by "; "."""
    parts = list(parts)
    if not parts:
        return not_run("nothing to judge")
    if all(p.verdict == "reproduced" for p in parts):
        return REPRODUCED
    for verdict, reason in (("contradicted", None), ("inconclusive", "precondition"),
                            ("inconclusive", "effect_excluded"), ("inconclusive", "scale"),
                            ("inconclusive", "underpowered"), ("inconclusive", "not_run"),
                            ("inconclusive", "unjudged")):
        hit = [p for p in parts if p.verdict == verdict and p.reason == reason]
        if hit:
            return Judgement(verdict, reason, "; ".join(dict.fromkeys(p.detail for p in hit if p.detail)))
    raise AssertionError("unreachable")


def legacy_judgement(holds: bool | None) -> Judgement:
    """The verdict a bare ``holds`` implies: True -> reproduced, None -> not run, False -> unjudged."""
    if holds is True:
        return REPRODUCED
    if holds is None:
        return not_run()
    return Judgement("inconclusive", "unjudged", "no verdict recorded (holds = false only)")


@dataclass
class Claim:
    """A statement, its verdict and the measured evidence; ``holds`` is derived from the verdict (and
    ``evaluated``: False when there was nothing to evaluate, i.e. ``holds`` is None)."""

    id: str
    statement: str
    verdict: Verdict
    reason: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    evaluated: bool = True
    #: the study-summary sentence the claim tests (:mod:`dlmlab.report.seeds`; set by ``with_seeds``)
    seed_ref: str | None = None
    seed_says: str = ""
    study_effect: Any = None
    deviation: str | None = None
    extension: bool = False  # tests something no summary states: reported apart, not in the study's tally

    def __post_init__(self):
        Judgement(self.verdict, self.reason, self.detail)  # validates verdict / reason / detail
        if self.reason == "not_run" and self.evaluated:
            raise ValueError(f"claim {self.id!r}: a claim that was not run cannot be evaluated")
        if not self.evaluated and self.reason not in ("not_run", "precondition"):
            raise ValueError(f"claim {self.id!r}: only a not-run or precondition verdict leaves it unevaluated, "
                             f"got {self.judgement.label()}")

    @property
    def judgement(self) -> Judgement:
        return Judgement(self.verdict, self.reason, self.detail)

    @property
    def holds(self) -> bool | None:
        """True exactly when reproduced; None when not evaluated; else False."""
        return True if self.verdict == "reproduced" else (False if self.evaluated else None)

    def to_dict(self) -> dict:
        return {"id": self.id, "statement": self.statement, "holds": self.holds, "verdict": self.verdict,
                "reason": self.reason, "detail": self.detail, "seed_ref": self.seed_ref,
                "seed_says": self.seed_says, "study_effect": self.study_effect, "deviation": self.deviation,
                "extension": self.extension, "evidence": dict(self.evidence)}


def claim(id: str, statement: str, holds: bool | None, *, judgement: Judgement | None = None,
          **evidence: Any) -> Claim:
    """A claim whose ``holds`` was computed as before and whose ``judgement`` says which verdict that is.

    ``holds`` must agree with the judgement (True exactly when reproduced; None for not run, and allowed for
    a precondition failure), so a verdict never changes whether a claim holds.  Without a judgement the
    verdict follows from ``holds`` alone (:func:`legacy_judgement`)."""
    holds = None if holds is None else bool(holds)
    j = legacy_judgement(holds) if judgement is None else judgement
    if (holds is True) != (j.verdict == "reproduced") or (j.reason == "not_run" and holds is not None):
        raise ValueError(f"claim {id!r}: holds={holds} disagrees with verdict {j.label()}")
    if holds is None and j.reason not in ("not_run", "precondition"):
        raise ValueError(f"claim {id!r}: holds=None (not evaluated) needs a not-run or precondition verdict, "
                         f"got {j.label()}")
    return Claim(id, statement, j.verdict, j.reason, evidence, j.detail, evaluated=holds is not None)


def judgement_of(d: dict) -> Judgement:
    """The verdict of a claim as results.json stores it (older files without ``verdict``: from ``holds``)."""
    if d.get("verdict") in VERDICTS:
        try:
            return Judgement(d["verdict"], d.get("reason"), d.get("detail") or "")
        except ValueError as e:  # a damaged or foreign verdict: shown as unjudged, with what was wrong
            return Judgement("inconclusive", "unjudged", f"stored verdict {d['verdict']!r} is invalid: {e}")
    return legacy_judgement(d.get("holds"))


def is_extension(c: dict | Claim) -> bool:
    """True for a claim that tests something no study summary states (reported apart, not tallied)."""
    return bool(c.extension if isinstance(c, Claim) else c.get("extension"))


def count_verdicts(claims: Iterable[dict | Claim], extensions: bool = False) -> dict[str, int]:
    """{"reproduced", "contradicted", "inconclusive", and one key per inconclusive reason}: counts of the
    study's claims (``extensions=True``: of its extensions instead)."""
    out = {v: 0 for v in VERDICTS}
    for c in claims:
        if is_extension(c) != extensions:
            continue
        j = c.judgement if isinstance(c, Claim) else judgement_of(c)
        out[j.verdict] += 1
        if j.reason:
            out[j.reason] = out.get(j.reason, 0) + 1
    return out


def claim_tally(claims: Iterable[dict | Claim]) -> dict[str, Any]:
    """The manifest's counts of a study's claims: ``claims_hold`` / ``claims_total`` / ``claims_verdicts`` over
    the claims that test a summary sentence, ``extensions_total`` / ``extensions_verdicts`` over its extensions."""
    claims = list(claims)
    own = [c for c in claims if not is_extension(c)]
    holds = [c.holds if isinstance(c, Claim) else c.get("holds") for c in own]
    return {"claims_hold": sum(1 for h in holds if h is True), "claims_total": len(own),
            "claims_verdicts": count_verdicts(own), "extensions_total": len(claims) - len(own),
            "extensions_verdicts": count_verdicts(claims, extensions=True)}


def verdict_summary(counts: dict[str, int]) -> str:
    """``4 reproduced, 1 contradicted, 2 inconclusive (1 underpowered, 1 precondition)``."""
    text = f"{counts.get('reproduced', 0)} reproduced, {counts.get('contradicted', 0)} contradicted, " \
           f"{counts.get('inconclusive', 0)} inconclusive"
    why = [f"{counts[r]} {r.replace('_', ' ')}" for r in REASONS if counts.get(r)]
    return text + (f" ({', '.join(why)})" if why else "")
