"""Sampling: few-step masked diffusion (prompt KV reused) and KV-cached autoregressive decoding."""

from dlmlab.sampling.ar import sample_ar
from dlmlab.sampling.diffusion import DiffusionSampleConfig, encode_prompt, sample_diffusion, unmask_schedule
from dlmlab.sampling.gumbel import sample_from_logits, top_p_filter

__all__ = ["sample_ar", "sample_diffusion", "DiffusionSampleConfig", "encode_prompt", "unmask_schedule",
           "sample_from_logits", "top_p_filter"]
