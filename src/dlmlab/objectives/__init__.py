"""Training objectives: AR next-token, absorbing-mask diffusion (MDLM) with its noise schedules, given-position
queries, per-position tagging and prefix diffusion.

:mod:`dlmlab.objectives.objective` is the one abstraction every training site uses: an objective's
``make_batch(tokens, gen, step=0)`` draws the batch (times through a noise schedule class, mask noise), its
``loss(model, batch)`` scores it, and ``to_card()`` / :func:`objective_from_card` write it into and read it
from a run's ``model.json``.  :func:`register_objective` adds a user's objective (a subclass of
:class:`CardObjective`) to the registry (:mod:`dlmlab.objectives.card`) that maps names to classes.
"""

from dlmlab.objectives.ar import ARObjective, ar_loss
from dlmlab.objectives.card import (OBJECTIVES, objective_from_card, objective_from_section, objective_section,
                                   register_objective)
from dlmlab.objectives.given import GivenMaskObjective
from dlmlab.objectives.mdlm import (MaskedDiffusionObjective, corrupt, elbo_bound, given_mask_loss, masked_nll,
                                    mdlm_loss)
from dlmlab.objectives.objective import CardObjective, Objective, step_batch, token_nll
from dlmlab.objectives.prefix import PrefixDiffusionObjective
from dlmlab.objectives.schedule import (SCHEDULES, CosineSchedule, LinearSchedule, LogLinearSchedule, NoiseSchedule,
                                        get_schedule, parse_schedule)
from dlmlab.objectives.tagging import TaggingObjective

__all__ = ["ar_loss", "mdlm_loss", "given_mask_loss", "corrupt", "masked_nll", "elbo_bound", "NoiseSchedule",
           "LinearSchedule", "CosineSchedule", "LogLinearSchedule", "SCHEDULES", "get_schedule", "parse_schedule",
           "Objective", "ARObjective", "MaskedDiffusionObjective", "GivenMaskObjective", "TaggingObjective",
           "PrefixDiffusionObjective", "OBJECTIVES", "objective_from_card", "step_batch", "token_nll",
           "CardObjective", "register_objective", "objective_from_section", "objective_section"]
