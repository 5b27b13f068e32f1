"""PreDiff-LM: adapting a pretrained causal LM to masked diffusion with hybrid attention.

``model.PreDiffLM`` wraps a toolkit :class:`~dlmlab.models.Transformer` (e.g. from
``load_gpt2`` / ``load_llama``); ``objectives`` holds the recipe and its baselines.
Sampling lives in :mod:`dlmlab.sampling`, metrics in :mod:`dlmlab.metrics` and the
study in :mod:`dlmlab.studies.prediff`.
"""

from dlmlab.prediff.model import PreDiffLM, TimeEmbedding, add_mask_token, sinusoidal
from dlmlab.prediff.objectives import (LOSSES, METHODS, MethodConfig, PrefixDiffusionObjective, annealed_mask,
                                      diffusion_loss, eval_nelbo, eval_nelbo_per_window, eval_original_weighting,
                                      make_task, method_objective, prompt_length)

__all__ = ["PreDiffLM", "TimeEmbedding", "add_mask_token", "sinusoidal", "METHODS", "MethodConfig", "annealed_mask",
           "diffusion_loss", "eval_nelbo", "eval_nelbo_per_window", "eval_original_weighting", "make_task",
           "PrefixDiffusionObjective", "method_objective", "LOSSES", "prompt_length"]
