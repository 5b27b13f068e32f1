"""Sampling: masked-diffusion decoding (orders, unmasking rules, blocks, KV reuse, trajectories) and KV-cached
AR decoding."""

from dlmlab.sampling.ar import sample_ar
from dlmlab.sampling.config import DecodeConfig
from dlmlab.sampling.decode import decode, generate
from dlmlab.sampling.denoiser import Denoiser, ModelDenoiser, as_denoiser
from dlmlab.sampling.diffusion import DiffusionSampleConfig, encode_prompt, sample_diffusion
from dlmlab.sampling.gumbel import sample_from_logits, top_p_filter
from dlmlab.sampling.schedules import linear_schedule, unmask_schedule
from dlmlab.sampling.interventions import Intervention, StepContext
from dlmlab.sampling.kv_reuse import kv_reuse_exactness
from dlmlab.sampling.lens import TrajectoryLens, lens_points, trajectory_lens
from dlmlab.sampling.patching import PatchResult, patch_trajectory
from dlmlab.sampling.trajectory import Activation, DecodeResult, StepRecord, TraceConfig
from dlmlab.sampling.trajectory_cache import Trajectory, generate_with_cache, run_sampler_with_cache

__all__ = ["sample_ar", "sample_diffusion", "DiffusionSampleConfig", "encode_prompt", "unmask_schedule",
           "linear_schedule", "sample_from_logits", "top_p_filter", "DecodeConfig", "decode", "generate", "Denoiser",
           "ModelDenoiser", "as_denoiser", "kv_reuse_exactness",
           "Activation", "DecodeResult", "StepRecord", "TraceConfig", "Intervention", "StepContext",
           "Trajectory", "run_sampler_with_cache", "generate_with_cache", "TrajectoryLens", "lens_points",
           "trajectory_lens", "PatchResult", "patch_trajectory"]
