"""Training objectives: AR next-token, absorbing-mask diffusion (MDLM) with its noise schedules, user-given mask.

:mod:`dlmlab.objectives.objective` is the one abstraction every training site uses: an objective's
``make_batch(tokens, gen)`` draws the batch (times through a noise schedule class, mask noise) and its
``loss(model, batch)`` scores it.
"""

from dlmlab.objectives.ar import ar_loss
from dlmlab.objectives.mdlm import corrupt, elbo_bound, given_mask_loss, masked_nll, mdlm_loss
from dlmlab.objectives.objective import ARObjective, MaskedDiffusionObjective, Objective, TaggingObjective, token_nll
from dlmlab.objectives.schedule import (SCHEDULES, CosineSchedule, LinearSchedule, LogLinearSchedule, NoiseSchedule,
                                        get_schedule, parse_schedule)

__all__ = ["ar_loss", "mdlm_loss", "given_mask_loss", "corrupt", "masked_nll", "elbo_bound", "NoiseSchedule",
           "LinearSchedule", "CosineSchedule", "LogLinearSchedule", "SCHEDULES", "get_schedule", "parse_schedule",
           "Objective", "ARObjective", "MaskedDiffusionObjective", "TaggingObjective", "token_nll"]
