"""Errors that mean bad user input: the CLI prints them as one line, without a traceback."""

from dlmlab.config import ConfigError
from dlmlab.data.paths import DataNotFound
from dlmlab.training.checkpoint import CheckpointError

USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, DataNotFound, CheckpointError, ValueError, FileNotFoundError)
