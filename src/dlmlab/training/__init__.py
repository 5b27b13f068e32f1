"""Training: config, loop, checkpoints, data parallelism."""

from dlmlab.training.checkpoint import CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from dlmlab.training.config import TrainConfig, lr_at
from dlmlab.training.distributed import DistContext, init_from_env, is_main_process, sync
from dlmlab.training.loop import make_optimizer, step_generator, train

__all__ = ["TrainConfig", "lr_at", "train", "make_optimizer", "step_generator", "save_checkpoint", "load_checkpoint",
           "latest_checkpoint", "list_checkpoints", "CheckpointError", "DistContext", "init_from_env",
           "is_main_process", "sync"]
