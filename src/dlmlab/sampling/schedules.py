"""How many positions a denoising step commits.

Count schedules fix the number per step in advance (``cosine``: MaskGIT's, few first, accelerating;
``linear``: equal shares, LLaDA's rule, remainder first);
``ancestral`` draws it (MDLM: with time running from 1 to 0 in ``S`` equal steps, each masked position is
revealed at step ``j`` with the noise schedule's
:meth:`~dlmlab.objectives.schedule.NoiseSchedule.reveal_prob`, ``1 / (S - j)`` for the linear one, so a
step may reveal nothing and ``S`` may exceed the number of positions).  Adaptive rules look at the step's sorted scores (Fast-dLLM):

* threshold: commit every position whose score >= ``threshold`` (at least one);
* factor: commit the ``n`` best positions while ``(n + 1) * (1 - c_n) < factor`` holds for each
  of them (c_n: the n-th best score; the best one always).
"""

from __future__ import annotations

import math

import torch

from dlmlab.objectives.schedule import LinearSchedule, NoiseSchedule


def _counts(total: int, steps: int, cum_share) -> list[int]:
    if total < 1:
        raise ValueError(f"gen_len must be >= 1, got {total}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    S = min(steps, total)
    counts, done = [], 0
    for s in range(1, S + 1):
        target = round(total * cum_share(s / S))
        target = max(done + 1, min(target, total - (S - s)))  # >= 1 now, >= 1 left for each later step
        counts.append(target - done)
        done = target
    return counts


def unmask_schedule(gen_len: int, steps: int) -> list[int]:
    """Tokens committed per step (cosine: few first, accelerating); ``min(steps, gen_len)`` entries summing to gen_len.

    The cumulative share after step ``s`` of ``S`` is ``1 - cos(pi/2 * s/S)``.
    """
    return _counts(gen_len, steps, lambda u: 1 - math.cos(math.pi / 2 * u))


def linear_schedule(total: int, steps: int) -> list[int]:
    """Equal shares per step, the remainder one each to the first steps: LLaDA's ``get_num_transfer_tokens``
    (``linear_schedule(8, 3) == [3, 3, 2]``), the linear noise schedule's equal expected shares rounded; with
    ``steps > total`` LLaDA's rule ends in steps of 0, this one stops after ``total`` steps of 1 (the same
    commits, fewer forwards).  ``min(steps, total)`` entries summing to ``total``."""
    _counts(total, steps, lambda u: u)  # the same one-line errors
    S = min(steps, total)
    base, extra = divmod(total, S)
    return [base + 1 if s < extra else base for s in range(S)]


# Count (unmasking) schedules by name: tokens committed per step.  Not the noise schedules of
# :data:`dlmlab.objectives.schedule.SCHEDULES`: there "cosine" is MDLM's noise schedule, whose sampler reveals
# many positions first; here "cosine" is MaskGIT's count rule, few first.
UNMASK_SCHEDULES = {"cosine": unmask_schedule, "linear": linear_schedule}


def ancestral_count(n_masked: torch.Tensor, step: int, steps: int, generator: torch.Generator | None = None,
                    schedule: NoiseSchedule | None = None) -> torch.Tensor:
    """Masked counts [R] -> positions revealed at step ``step`` (0-based) of ``steps`` [R]: Binomial(n, p) with
    ``p = schedule.reveal_prob(step, steps)`` (default linear: ``1 / (steps - step)``)."""
    p = (schedule or LinearSchedule()).reveal_prob(step, steps)
    width = int(n_masked.max()) if n_masked.numel() else 0
    u = torch.rand((n_masked.shape[0], width), generator=generator, dtype=torch.float64)
    hits = (u < p) & (torch.arange(width)[None] < n_masked.cpu()[:, None])
    return hits.sum(1).to(n_masked.device)


def threshold_count(sorted_scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Scores [B,L] sorted descending (-inf where not a candidate) -> commits per row [B] (>= 1)."""
    return (sorted_scores >= threshold).sum(1).clamp(min=1)


def factor_count(sorted_scores: torch.Tensor, factor: float) -> torch.Tensor:
    """Scores [B,L] sorted descending -> commits per row [B]: the longest run of n with (n+1)(1-c_n) < factor (>= 1)."""
    n = torch.arange(1, sorted_scores.shape[1] + 1, device=sorted_scores.device, dtype=sorted_scores.dtype)
    ok = (n + 1) * (1 - sorted_scores) < factor
    ok[:, 0] = True
    return ok.long().cumprod(1).sum(1)
