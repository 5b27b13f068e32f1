"""lm-evaluation-harness backend: the harness model ``dlmlab`` (:class:`DlmlabLM`), offline tasks, estimators.

Importing this package registers the model under the name ``dlmlab`` in the harness's model registry of
this Python process (``lm_eval.simple_evaluate(model="dlmlab", model_args="path=RUN")`` works after it); the
harness's own ``lm_eval`` / ``lm-eval`` command does not import dlmlab, so there use ``dlmlab lm-eval``.
It also gives the harness's results table its column names (:mod:`dlmlab.lmeval.table`).  See docs/lm_eval.md.
"""

from dlmlab.lmeval.config import LMEvalConfig
from dlmlab.lmeval.model import DlmlabLM
from dlmlab.lmeval.table import name_table_columns
from dlmlab.lmeval.tasks import TASK_NAMES, TASKS_DIR, task_manager

name_table_columns()

__all__ = ["DlmlabLM", "LMEvalConfig", "TASKS_DIR", "TASK_NAMES", "task_manager"]
