"""Claims: a statement checked against measurements, reported whether or not it holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Claim:
    """``holds`` is computed from runs; ``None`` means it could not be evaluated (say why in evidence)."""

    id: str
    statement: str
    holds: bool | None
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["holds"] = None if self.holds is None else bool(self.holds)
        return d


def claim(id: str, statement: str, holds: bool | None, **evidence: Any) -> Claim:
    return Claim(id, statement, holds, evidence)
