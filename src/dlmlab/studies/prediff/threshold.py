"""Steps to a perplexity threshold: AR initialisation vs training from scratch (censored at the budget).

The study: starting from the pretrained AR model "reaches the perplexity threshold in fewer adaptation steps"
than training a masked-diffusion model from scratch.  The threshold here is fixed before any step is counted:

* each method's **plateau** is its held-out NLL averaged over the curve points of the last
  ``PLATEAU_SHARE`` of the budget and over seeds (one noisy point of a flat curve no longer sets it);
* the **threshold** lies ``THRESHOLD_FRACTION`` of the way from the scratch plateau to the AR-initialised
  (``prediff``) plateau, one value for every seed and method (0.5: midway, chosen a priori);
* a run reaches it at the first curve step whose held-out NLL is at or below it; a run that never does is
  **censored** at the budget (``None``, reported as ``>= budget``), and the comparison
  (:func:`~dlmlab.studies.prediff.paired.censored_steps_difference`) bounds the paired difference from both
  sides instead of inventing a step count.

Curves are rows ``{"step", "ppl"}`` (held-out PPL, diffusion: ELBO bound) starting at step 0.
"""

from __future__ import annotations

import math

import numpy as np

from dlmlab.metrics import steps_to_threshold

THRESHOLD_FRACTION = 0.5
PLATEAU_SHARE = 0.25
FAST, SLOW = "prediff", "scratch"  # the AR-initialised method and the from-scratch one


def plateau_nll(curves: list[list[dict]], budget: int, share: float = PLATEAU_SHARE) -> float:
    """Mean held-out NLL (log PPL) over the curve points with ``step >= (1 - share) * budget``, then over
    seeds; curves [seeds][rows]."""
    if not curves or not 0 < share <= 1:
        raise ValueError(f"need curves and 0 < share <= 1, got {len(curves)} curves, share {share}")
    start = (1 - share) * budget
    per_seed = []
    for rows in curves:
        tail = [math.log(r["ppl"]) for r in rows if r["step"] >= start]
        if not tail:
            raise ValueError(f"a curve has no point in the last {share:.0%} of the budget ({budget} steps)")
        per_seed.append(float(np.mean(tail)))
    return float(np.mean(per_seed))


def threshold_nll(plateau_slow: float, plateau_fast: float, fraction: float = THRESHOLD_FRACTION) -> float:
    """The threshold ``fraction`` of the way from the from-scratch plateau to the AR-initialised one (nats)."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    return plateau_slow + fraction * (plateau_fast - plateau_slow)


def steps_to_reach(methods: dict, budget: int, fraction: float = THRESHOLD_FRACTION) -> dict | None:
    """``methods[name]["curves"]`` [seeds][rows] -> {nll, ppl, fraction, plateaus {name: nll}, budget,
    steps {name: [step or None per seed]}, reached {name: "k/n"}}; None without both methods."""
    if FAST not in methods or SLOW not in methods:
        return None
    plateaus = {n: plateau_nll(m["curves"], budget) for n, m in methods.items() if m.get("curves")}
    thr = threshold_nll(plateaus[SLOW], plateaus[FAST], fraction)
    steps = {n: [steps_to_threshold(c, "ppl", math.exp(thr)) for c in m["curves"]] for n, m in methods.items()
             if m.get("curves")}
    return {"nll": thr, "ppl": math.exp(thr), "fraction": fraction, "plateau_share": PLATEAU_SHARE,
            "plateaus": plateaus, "budget": budget, "steps": steps,
            "reached": {n: f"{sum(s is not None for s in v)}/{len(v)}" for n, v in steps.items()}}


def fmt_steps(steps: list[int | None], budget: int) -> str:
    """``100, 150, >= 500`` (a censored run shown as ``>= budget``)."""
    return ", ".join(f">= {budget}" if s is None else str(s) for s in steps)
