"""Removed: ``dlmlab.loading`` became :mod:`dlmlab.rundir` (``dlmlab.load(path)`` is unchanged)."""

raise ModuleNotFoundError(
    "dlmlab.loading was removed: call dlmlab.load(path) (it returns dlmlab.rundir.load.Loaded); run folders, "
    "checkpoints and model cards are in dlmlab.rundir (card, checkpoint, load)", name="dlmlab.loading")
