"""Training: config, the loop (``train(model, cfg, batches, objective)``), data parallelism.

Run folders (model card, checkpoints, loading) are :mod:`dlmlab.rundir`; objectives are :mod:`dlmlab.objectives`.
"""

from dlmlab.training.config import TrainConfig, lr_at
from dlmlab.training.distributed import DistContext, init_from_env, is_main_process, sync
from dlmlab.training.loop import make_optimizer, step_generator, train

__all__ = ["TrainConfig", "lr_at", "train", "make_optimizer", "step_generator", "DistContext", "init_from_env",
           "is_main_process", "sync"]
