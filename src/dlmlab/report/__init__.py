"""Study outputs: claims, results.json / report.md, figures."""

from dlmlab.report.claims import Claim, claim
from dlmlab.report.results import StudyResult, Table, load_results, write_study

__all__ = ["Claim", "claim", "StudyResult", "Table", "write_study", "load_results"]
