"""The study's claims, computed from the measured numbers (reported whether or not they hold).

Verdicts (see :mod:`dlmlab.report.claims`): each paired comparison's 95% interval decides its part (wholly
below 0, A better: reproduced; wholly above 0: contradicted; spanning 0: inconclusive / underpowered); a
claim needing several comparisons takes :func:`~dlmlab.report.claims.combine`; a comparison the preset did
not make is inconclusive / not_run; a comparison that is not reproduced while neither of its two models
learned the language (held-out NLL of both >= log(vocabulary), the uniform guess) is inconclusive /
precondition.  The speed claim: not timed robustly -> not_run; else the ratio of
medians decides (below 1 + margin: contradicted).
"""

from __future__ import annotations

import math

from dlmlab.metrics.speed import speedup
from dlmlab.report import Claim, claim
from dlmlab.report.claims import (REPRODUCED, Judgement, combine, contradicted, not_run, precondition_failed,
                                  verdict_from_interval)

SPEEDUP_TARGET = 1.5
SPEED_MARGIN = 0.1  # "faster" needs a ratio of medians >= 1 + SPEED_MARGIN
MIN_SPEED_REPEATS = 3  # interleaved rounds per method before a speed comparison counts
SPEED_RULE = (f"holds when 8-step PreDiff and AR were timed interleaved (each round runs both, order rotated), "
              f">= {MIN_SPEED_REPEATS} rounds each, and the ratio of their median tokens/s is >= 1 + {SPEED_MARGIN}; "
              f"otherwise the speeds are reported as measurements only (holds = null)")


def _evidence(c: dict | None) -> dict:
    """A paired comparison's numbers for a claim's evidence."""
    if c is None:
        return {"missing": True}
    return {"a": c["a"], "b": c["b"], "mean_difference": c["mean"], "interval_95": [c["lo"], c["hi"]],
            "per_seed": c["per_seed"], "seeds": c["n_seeds"], "windows": c["n_windows"]}


def at_chance(res: dict, method: str) -> bool:
    """The method's held-out NLL is no better than a uniform guess over the vocabulary (False when unknown)."""
    nll = res.get("methods", {}).get(method, {}).get("val_nll")
    vocab = res.get("data", {}).get("tokenizer_vocab")
    return nll is not None and bool(vocab) and nll >= math.log(vocab)


def comparison_verdict(c: dict | None, res: dict | None = None) -> Judgement:
    """A paired comparison's verdict: its interval of A - B against 0, A's side below (``None``: not run); not
    reproduced while both models are at chance (``res`` given): precondition."""
    if c is None:
        return not_run("comparison not made in this preset")
    j = verdict_from_interval(c["lo"], c["hi"], side=-1, what=f"{c.get('a', 'A')} - {c.get('b', 'B')}")
    if (j.verdict == "reproduced") != bool(c["holds"]):  # the comparison's own rule (hi < 0) decides holds
        raise ValueError(f"comparison {c.get('a')} vs {c.get('b')}: holds={c['holds']} disagrees with its interval "
                         f"[{c['lo']}, {c['hi']}]")
    if j.verdict != "reproduced" and res is not None and all(at_chance(res, m) for m in (c["a"], c["b"])):
        return precondition_failed(f"{c['a']} and {c['b']}: held-out NLL >= log(vocabulary) (a uniform guess)")
    return j


def _paired_claim(cid: str, statement: str, comps: list[dict | None], res: dict | None = None, **extra) -> Claim:
    """Holds when every listed paired comparison's whole 95% interval is below zero (A better than B)."""
    holds = None if any(c is None for c in comps) else all(c["holds"] for c in comps)
    ev = {f"{c['a']}_vs_{c['b']}": _evidence(c) for c in comps if c is not None}
    judgement = not_run("comparison not made in this preset") if holds is None else \
        combine(comparison_verdict(c, res) for c in comps)
    return claim(cid, statement, holds, judgement=judgement, **ev,
                 rule="A minus B held-out NLL (nats / target token), two-level "
                 "bootstrap 95% interval over seeds and windows; holds only when every interval excludes 0 on A's "
                 "side", **extra)


def compute_claims(res: dict) -> list[Claim]:
    out = []
    comp = res.get("comparisons", {})
    out.append(_paired_claim(
        "hybrid_beats_uniform_bidirectional",
        "Adapting with the hybrid mask (prompt causal, target bidirectional) gives a lower held-out ELBO perplexity "
        "bound than adapting with uniform bidirectional attention, same budget, under the unshifted and under the "
        "shifted (DiffuGPT-style) objective",
        [comp.get("hybrid_vs_uniform_bidir"), comp.get("hybrid_vs_uniform_bidir_shifted")], res))
    out.append(_paired_claim(
        "attention_and_objective_compose",
        "Attention adaptation (hybrid mask) and objective adaptation (DiffuGPT shifted prediction with mask "
        "annealing) combined beat each alone (lower ELBO perplexity bound)",
        [comp.get("combined_vs_attention_only"), comp.get("combined_vs_objective_only")], res))
    thr = res.get("threshold", {})
    c = comp.get("ar_init_vs_scratch_steps")
    out.append(claim(
        "ar_init_reaches_threshold_faster_than_scratch",
        "Starting from the pretrained AR model reaches the perplexity threshold (the best held-out bound the "
        "from-scratch MDLM reaches within the budget, per seed) in fewer adaptation steps than training from scratch",
        None if c is None else c["holds"], judgement=comparison_verdict(c, res),
        **({} if c is None else {"steps_difference": _evidence(c)}),
        threshold_ppl_per_seed=thr.get("value"), ar_init_steps=thr.get("steps", {}).get("prediff"),
        scratch_steps=thr.get("steps", {}).get("scratch"),
        note="steps = budget + 1 stands for 'not reached within the budget'; excludes the backbone's own "
             "pretraining compute; bootstrap over seeds"))
    c = comp.get("ar_control_vs_best_diffusion")
    out.append(_paired_claim(
        "ar_control_still_better",
        "The AR model fine-tuned for the same budget still has a lower held-out perplexity than the best diffusion "
        "adaptation's ELBO bound (the diffusion numbers are upper bounds)",
        [c], res, best_diffusion_method=None if c is None else c["b"]))

    out.append(speed_claim(res.get("speed", {})))
    return out


def speed_claim(sp: dict) -> Claim:
    """``few_step_sampling_faster_than_ar`` from ``res["speed"]`` (entries of :func:`dlmlab.metrics.speed.throughputs`):
    a claim only when the two were timed interleaved over enough rounds (see ``SPEED_RULE``)."""
    d8, ar = sp.get("prediff@8", {}), sp.get("ar_control", {})
    ratio = speedup(d8, ar)
    robust = all(x.get("interleaved") and len(x.get("times_s", [])) >= MIN_SPEED_REPEATS for x in (d8, ar))
    if ratio is None or not robust:
        judgement = not_run("speeds not measured" if ratio is None else
                            f"not timed interleaved over >= {MIN_SPEED_REPEATS} rounds")
    else:
        judgement = REPRODUCED if ratio >= 1 + SPEED_MARGIN else contradicted(
            f"speedup {ratio:.2f} < {1 + SPEED_MARGIN:g}")
    return claim(
        "few_step_sampling_faster_than_ar",
        "8-step PreDiff sampling (prompt keys/values reused) generates more tokens per second than KV-cached AR "
        f"decoding on the same backbone, by a margin of at least {SPEED_MARGIN:.0%}, timed interleaved in the same run",
        None if ratio is None or not robust else ratio >= 1 + SPEED_MARGIN, judgement=judgement,
        diffusion_8_steps_tokens_per_s=d8.get("tokens_per_s"), ar_kv_cached_tokens_per_s=ar.get("tokens_per_s"),
        speedup=ratio, interleaved=robust, rounds=min(len(d8.get("times_s", [])), len(ar.get("times_s", []))),
        rule=SPEED_RULE, target_speedup=SPEEDUP_TARGET,
        meets_target=None if ratio is None or not robust else ratio >= SPEEDUP_TARGET)
