"""The reversal study's claims, each against a control and decided by 95% intervals over seeds.

Controls: chance (ARM), the ARM with the same positional encoding (MDM transfer, gradient alignment),
the next encoding in the study's order (PE ordering), zero correlation (attention signature).  The one
fixed number is the study's own gradient-cosine level ``GRAD_COS_LEVEL``.

Verdicts (see :mod:`dlmlab.report.claims`): each interval decides its part (above its control: reproduced;
wholly on the other side: contradicted; spanning it: inconclusive / underpowered); a part whose model did
not learn the forward facts (forward-accuracy interval reaching chance, when ``chance`` is given) is
inconclusive / precondition; a claim needing every part takes :func:`~dlmlab.report.claims.combine`.
"""

from __future__ import annotations

from dlmlab.report import claim
from dlmlab.report.claims import (REPRODUCED, Judgement, combine, contradicted, not_run, precondition_failed,
                                  verdict_from_interval)
from dlmlab.report.intervals import paired_diff_ci
from dlmlab.studies.reversal.summary import ORDER, ci, diff

GRAD_COS_LEVEL = 0.5  # the study reports storage-gradient cosines of about 0.6 and above
MECHANISM_PES = ("rope", "alibi")  # the encodings whose transfer the storage-routing account predicts


def _ev(**intervals) -> dict:
    """Evidence: every interval as ``name_mean / name_lo / name_hi``."""
    out = {}
    for name, iv in intervals.items():
        out.update({f"{name}_mean": iv.mean, f"{name}_lo": iv.lo, f"{name}_hi": iv.hi})
    return out


def _learned_forward(summary, kind: str, pe: str, chance: float | None) -> Judgement | None:
    """``None`` when ``chance`` is not given or the model's forward-accuracy interval lies above it, else an
    inconclusive / precondition verdict (the model never learned the facts whose reversal the claim is about)."""
    if chance is None:
        return None
    f = ci(summary, kind, pe, "fwd_acc")
    return None if f.lo > chance else precondition_failed(
        f"{kind}/{pe} forward accuracy {f.fmt()} reaches chance {chance:.3g}")


def _part(j: Judgement, pre: Judgement | None) -> Judgement:
    """A part's verdict: the interval's, unless it is not reproduced and the precondition failed."""
    return j if j.verdict == "reproduced" or pre is None else pre


def arm_fails_reverse(summary, positions, chance):
    if not positions:
        return claim("arm_fails_reverse", "needs at least one positional encoding", None,
                     judgement=not_run("no positional encoding was run"), chance=chance)
    ev, ok, parts = {}, True, []
    for pe in positions:
        f, r = ci(summary, "arm", pe, "fwd_acc"), ci(summary, "arm", pe, "rev_acc")
        ok &= f.lo > chance and not r.lo > chance
        ev.update(_ev(**{f"forward_acc_{pe}": f, f"reverse_acc_{pe}": r}))
        if not f.lo > chance:
            parts.append(precondition_failed(f"ARM/{pe} forward accuracy {f.fmt()} reaches chance {chance:.3g}"))
        elif r.lo > chance:
            parts.append(contradicted(f"ARM/{pe} reverse accuracy {r.fmt()} above chance {chance:.3g}"))
        else:
            parts.append(REPRODUCED)
    return claim("arm_fails_reverse",
                 "The ARM trained on 'A r.. B' answers the forward query above chance (interval above chance) but not "
                 "the reverse query 'B r..' -> A (its interval reaches chance), for every positional encoding.",
                 ok, judgement=combine(parts), chance=chance, **ev)


def mdm_transfers_reverse(summary, positions, kinds, chance: float | None = None):
    pes = [pe for pe in MECHANISM_PES if pe in positions]
    if not pes:
        return claim("mdm_transfers_reverse", "needs RoPE or ALiBi", None, judgement=not_run("no RoPE / ALiBi"),
                     positions=list(positions))
    ev, ok, parts = {}, True, []
    for pe in positions:
        rise = _rise(summary, pe)
        ev.update(_ev(**{f"reverse_p_rise_{pe}": rise}))
        if "arm" in kinds:
            vs = diff(summary, ("mdm", pe), ("arm", pe), "rev_p")
            ev.update(_ev(**{f"reverse_p_mdm_minus_arm_{pe}": vs}))
        if pe in pes:
            ok &= rise.lo > 0 and ("arm" not in kinds or vs.lo > 0)
            pre = _learned_forward(summary, "mdm", pe, chance)
            parts.append(_part(verdict_from_interval(rise.lo, rise.hi, what=f"{pe} reverse p rise"), pre))
            if "arm" in kinds:
                parts.append(_part(verdict_from_interval(vs.lo, vs.hi, what=f"{pe} reverse p MDM - ARM"), pre))
    return claim("mdm_transfers_reverse",
                 "Under forward-only training ('[M] r.. B' -> A) the MDM's probability of A on the never-trained reverse "
                 "query 'B r.. [M]' rises above its value at initialisation and above the ARM's with the same "
                 f"encoding (paired intervals exclude 0), for {' and '.join(pes)} (learned positions in the evidence).",
                 ok, judgement=combine(parts), **ev)


def _rise(summary, pe):
    """Paired interval of final minus initial reverse p of the MDM."""
    v = summary[f"mdm/{pe}"]["values"]
    return paired_diff_ci(v["rev_p"], v["initial_rev_p"])


def pe_ordering(summary, positions, chance: float | None = None):
    order = [pe for pe in ORDER if pe in positions]
    if len(order) < 2:
        return claim("pe_ordering", "needs at least two positional encodings", None,
                     judgement=not_run("fewer than two positional encodings"), positions=list(positions))
    ev, ok, acc_ok, parts = {}, True, True, []
    for a, b in zip(order, order[1:]):
        dp, da = diff(summary, ("mdm", a), ("mdm", b), "rev_p"), diff(summary, ("mdm", a), ("mdm", b), "rev_acc")
        ok &= dp.lo > 0
        pre = _learned_forward(summary, "mdm", a, chance) or _learned_forward(summary, "mdm", b, chance)
        parts.append(_part(verdict_from_interval(dp.lo, dp.hi, what=f"reverse p {a} - {b}"), pre))
        acc_ok &= da.lo > 0
        ev.update(_ev(**{f"reverse_p_{a}_minus_{b}": dp, f"reverse_acc_{a}_minus_{b}": da}))
    for pe in order:
        ev.update(_ev(**{f"reverse_p_{pe}": ci(summary, "mdm", pe, "rev_p"),
                         f"reverse_acc_{pe}": ci(summary, "mdm", pe, "rev_acc")}))
    return claim("pe_ordering",
                 f"The MDM's final reverse probability orders {' > '.join(order)} strictly: each paired difference's "
                 "95% interval (over seeds) lies above 0 (Table 2).", ok, judgement=combine(parts),
                 accuracy_order_holds=acc_ok, **ev)


def attention_correlation_positive(summary, positions, chance: float | None = None):
    pes = [pe for pe in MECHANISM_PES if pe in positions]
    if not pes:
        return claim("attention_correlation_positive", "needs RoPE or ALiBi", None,
                     judgement=not_run("no RoPE / ALiBi"), positions=list(positions))
    ev, ok, parts = {}, True, []
    for pe in positions:
        pc, fc = ci(summary, "mdm", pe, "positional_corr"), ci(summary, "mdm", pe, "score_corr_train")
        ev.update(_ev(**{f"positional_corr_{pe}": pc, f"full_score_corr_{pe}": fc}))
        if pe in pes:
            ok &= pc.lo > 0
            parts.append(_part(verdict_from_interval(pc.lo, pc.hi, what=f"{pe} positional correlation"),
                               _learned_forward(summary, "mdm", pe, chance)))
    return claim("attention_correlation_positive",
                 "In the trained MDM the positional part of the query->B attention score (averaged over facts, as a "
                 "function of the distance) is positively correlated between the forward and the reverse query "
                 f"(interval above 0) for {' and '.join(pes)}; the full-score correlation across facts is evidence only.",
                 ok, judgement=combine(parts), **ev)


def gradient_alignment_positive(summary, positions, kinds, chance: float | None = None):
    pes = [pe for pe in MECHANISM_PES if pe in positions]
    if not pes:
        return claim("gradient_alignment_positive", "needs RoPE or ALiBi", None,
                     judgement=not_run("no RoPE / ALiBi"), positions=list(positions))
    ev, ok, parts = {}, True, []
    for pe in positions:
        c = ci(summary, "mdm", pe, "grad_cos_mean")
        ev.update(_ev(**{f"mdm_grad_cos_{pe}": c}))
        vs = None
        if "arm" in kinds:
            vs = diff(summary, ("mdm", pe), ("arm", pe), "grad_cos_mean")
            ev.update(_ev(**{f"arm_grad_cos_{pe}": ci(summary, "arm", pe, "grad_cos_mean"),
                             f"mdm_minus_arm_grad_cos_{pe}": vs}))
        if pe in pes:
            ok &= c.lo > GRAD_COS_LEVEL and (vs is None or vs.lo > 0)
            pre = _learned_forward(summary, "mdm", pe, chance)
            cos = verdict_from_interval(c.lo, c.hi, level=GRAD_COS_LEVEL, what=f"{pe} MDM gradient cosine")
            parts.append(_part(cos, pre))
            if vs is not None:
                parts.append(_part(verdict_from_interval(vs.lo, vs.hi, what=f"{pe} gradient cosine MDM - ARM"), pre))
    return claim("gradient_alignment_positive",
                 "For the MDM the per-fact cosine between the forward-loss and the reverse-loss gradients on the storage "
                 f"parameters (W_v, W_o; autograd), averaged over training, exceeds {GRAD_COS_LEVEL} (interval) and the "
                 f"ARM's with the same encoding (paired interval above 0), for {' and '.join(pes)}.", ok,
                 judgement=combine(parts), **ev)


def make_claims(summary: dict, positions: list[str], kinds: list[str], chance: float) -> list:
    claims = [arm_fails_reverse(summary, positions, chance) if "arm" in kinds
              else claim("arm_fails_reverse", "ARM not trained in this preset", None,
                         judgement=not_run("ARM not trained"), kinds=list(kinds))]
    if "mdm" not in kinds:
        return claims
    return claims + [mdm_transfers_reverse(summary, positions, kinds, chance), pe_ordering(summary, positions, chance),
                     attention_correlation_positive(summary, positions, chance),
                     gradient_alignment_positive(summary, positions, kinds, chance)]
