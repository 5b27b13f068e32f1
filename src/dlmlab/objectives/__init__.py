"""Training objectives: AR next-token, absorbing-mask diffusion (MDLM), user-given mask."""

from dlmlab.objectives.ar import ar_loss
from dlmlab.objectives.mdlm import corrupt, elbo_bound, given_mask_loss, masked_nll, mdlm_loss

__all__ = ["ar_loss", "mdlm_loss", "given_mask_loss", "corrupt", "masked_nll", "elbo_bound"]
