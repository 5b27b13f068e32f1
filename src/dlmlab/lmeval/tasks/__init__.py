"""The dlmlab harness tasks (YAMLs beside this file; data from the offline data folder)."""

from __future__ import annotations

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
TASK_NAMES = ("dlmlab_wikitext2", "dlmlab_reversal_mc", "dlmlab_repeat_gen")


def task_manager(include_path: str | Path | list | None = None, **kwargs):
    """An ``lm_eval.tasks.TaskManager`` that knows the dlmlab tasks (plus ``include_path``, the user's own);
    ``include_defaults=False`` leaves out the harness's built-in tasks (indexing them takes tens of seconds)."""
    from lm_eval.tasks import TaskManager

    extra = [] if include_path is None else list(include_path) if isinstance(include_path, (list, tuple)) else [include_path]
    return TaskManager(include_path=[str(TASKS_DIR)] + [str(p) for p in extra], **kwargs)
