"""Study outputs: claims (with their verdicts), results.json / report.md, figures."""

from dlmlab.report.claims import Claim, Judgement, claim, verdict_from_interval
from dlmlab.report.results import StudyResult, Table, load_results, write_study

__all__ = ["Claim", "Judgement", "claim", "verdict_from_interval", "StudyResult", "Table", "write_study",
           "load_results"]
