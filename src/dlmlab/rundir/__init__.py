"""Run folders: what training writes and loading reads, in one package.

* :mod:`dlmlab.rundir.card`: ``model.json`` (the model's family and config, the objective as it writes itself);
* :mod:`dlmlab.rundir.checkpoint`: ``checkpoints/step_N`` (safetensors + JSON, atomic, never unpickled);
* :mod:`dlmlab.rundir.load`: :func:`dlmlab.load` (:class:`Loaded`), which also reads Hugging Face folders.

The package imports only the layers below it (models, objectives, data, files); a ``dlmlab train`` run's
``config.json`` (:class:`~dlmlab.training.run_config.RunConfig`) belongs to the training pipeline.

Noise schedules are written as ``schedule.to_data()`` and read by the one parser,
:func:`dlmlab.objectives.schedule.parse_schedule`.
"""

from dlmlab.rundir.card import CARD_NAME, TOKENIZER_NAME, card_objective, model_card, read_card, write_card
from dlmlab.rundir.checkpoint import (CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint,
                                    save_checkpoint)

__all__ = ["CARD_NAME", "TOKENIZER_NAME", "card_objective", "model_card", "read_card", "write_card",
           "CheckpointError", "latest_checkpoint", "list_checkpoints", "load_checkpoint", "save_checkpoint"]
