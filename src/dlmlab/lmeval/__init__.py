"""lm-evaluation-harness backend: the harness model ``dlmlab`` (:class:`DlmlabLM`), offline tasks, estimators.

``from dlmlab.lmeval import DlmlabLM`` registers the model with the harness.  See docs/lm_eval.md.
"""

from dlmlab.lmeval.config import LMEvalConfig
from dlmlab.lmeval.model import DlmlabLM
from dlmlab.lmeval.tasks import TASK_NAMES, TASKS_DIR, task_manager

__all__ = ["DlmlabLM", "LMEvalConfig", "TASKS_DIR", "TASK_NAMES", "task_manager"]
