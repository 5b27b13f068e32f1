"""The reversal study's claims, each against a control and decided by 95% intervals over seeds.

Controls: chance (ARM), the ARM with the same positional encoding (MDM transfer, gradient alignment),
the next encoding in the study's order (PE ordering), zero correlation (attention signature).  The one
fixed number is the study's own gradient-cosine level ``GRAD_COS_LEVEL``.
"""

from __future__ import annotations

from dlmlab.report import claim
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


def arm_fails_reverse(summary, positions, chance):
    ev, ok = {}, True
    for pe in positions:
        f, r = ci(summary, "arm", pe, "fwd_acc"), ci(summary, "arm", pe, "rev_acc")
        ok &= f.lo > chance and not r.lo > chance
        ev.update(_ev(**{f"forward_acc_{pe}": f, f"reverse_acc_{pe}": r}))
    return claim("arm_fails_reverse",
                 "The ARM trained on 'A r.. B' answers the forward query above chance (interval above chance) but not "
                 "the reverse query 'B r..' -> A (its interval reaches chance), for every positional encoding.",
                 ok, chance=chance, **ev)


def mdm_transfers_reverse(summary, positions, kinds):
    pes = [pe for pe in MECHANISM_PES if pe in positions]
    if not pes:
        return claim("mdm_transfers_reverse", "needs RoPE or ALiBi", None, positions=list(positions))
    ev, ok = {}, True
    for pe in positions:
        rise = _rise(summary, pe)
        ev.update(_ev(**{f"reverse_p_rise_{pe}": rise}))
        if "arm" in kinds:
            vs = diff(summary, ("mdm", pe), ("arm", pe), "rev_p")
            ev.update(_ev(**{f"reverse_p_mdm_minus_arm_{pe}": vs}))
        if pe in pes:
            ok &= rise.lo > 0 and ("arm" not in kinds or vs.lo > 0)
    return claim("mdm_transfers_reverse",
                 "Under forward-only training ('[M] r.. B' -> A) the MDM's probability of A on the never-trained reverse "
                 "query 'B r.. [M]' rises above its value at initialisation and above the ARM's with the same "
                 f"encoding (paired intervals exclude 0), for {' and '.join(pes)} (learned positions in the evidence).",
                 ok, **ev)


def _rise(summary, pe):
    """Paired interval of final minus initial reverse p of the MDM."""
    v = summary[f"mdm/{pe}"]["values"]
    return paired_diff_ci(v["rev_p"], v["initial_rev_p"])


def pe_ordering(summary, positions):
    order = [pe for pe in ORDER if pe in positions]
    if len(order) < 2:
        return claim("pe_ordering", "needs at least two positional encodings", None, positions=list(positions))
    ev, ok, acc_ok = {}, True, True
    for a, b in zip(order, order[1:]):
        dp, da = diff(summary, ("mdm", a), ("mdm", b), "rev_p"), diff(summary, ("mdm", a), ("mdm", b), "rev_acc")
        ok &= dp.lo > 0
        acc_ok &= da.lo > 0
        ev.update(_ev(**{f"reverse_p_{a}_minus_{b}": dp, f"reverse_acc_{a}_minus_{b}": da}))
    for pe in order:
        ev.update(_ev(**{f"reverse_p_{pe}": ci(summary, "mdm", pe, "rev_p"),
                         f"reverse_acc_{pe}": ci(summary, "mdm", pe, "rev_acc")}))
    return claim("pe_ordering",
                 f"The MDM's final reverse probability orders {' > '.join(order)} strictly: each paired difference's "
                 "95% interval (over seeds) lies above 0 (Table 2).", ok, accuracy_order_holds=acc_ok, **ev)


def attention_correlation_positive(summary, positions):
    pes = [pe for pe in MECHANISM_PES if pe in positions]
    if not pes:
        return claim("attention_correlation_positive", "needs RoPE or ALiBi", None, positions=list(positions))
    ev, ok = {}, True
    for pe in positions:
        pc, fc = ci(summary, "mdm", pe, "positional_corr"), ci(summary, "mdm", pe, "score_corr_train")
        ev.update(_ev(**{f"positional_corr_{pe}": pc, f"full_score_corr_{pe}": fc}))
        if pe in pes:
            ok &= pc.lo > 0
    return claim("attention_correlation_positive",
                 "In the trained MDM the positional part of the query->B attention score (averaged over facts, as a "
                 "function of the distance) is positively correlated between the forward and the reverse query "
                 f"(interval above 0) for {' and '.join(pes)}; the full-score correlation across facts is evidence only.",
                 ok, **ev)


def gradient_alignment_positive(summary, positions, kinds):
    pes = [pe for pe in MECHANISM_PES if pe in positions]
    if not pes:
        return claim("gradient_alignment_positive", "needs RoPE or ALiBi", None, positions=list(positions))
    ev, ok = {}, True
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
    return claim("gradient_alignment_positive",
                 "For the MDM the per-fact cosine between the forward-loss and the reverse-loss gradients on the storage "
                 f"parameters (W_v, W_o; autograd), averaged over training, exceeds {GRAD_COS_LEVEL} (interval) and the "
                 f"ARM's with the same encoding (paired interval above 0), for {' and '.join(pes)}.", ok, **ev)


def make_claims(summary: dict, positions: list[str], kinds: list[str], chance: float) -> list:
    claims = [arm_fails_reverse(summary, positions, chance) if "arm" in kinds
              else claim("arm_fails_reverse", "ARM not trained in this preset", None, kinds=list(kinds))]
    if "mdm" not in kinds:
        return claims
    return claims + [mdm_transfers_reverse(summary, positions, kinds), pe_ordering(summary, positions),
                     attention_correlation_positive(summary, positions),
                     gradient_alignment_positive(summary, positions, kinds)]
