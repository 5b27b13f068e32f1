"""A built reversal summary (three seeds per group) for the claim tests: the study's pattern by default."""

from __future__ import annotations

from dlmlab.studies.reversal.summary import group

PES, KINDS = ["learned", "rope", "alibi"], ["mdm", "arm"]


def reversal_summary(rev_p=None, grad=None, pos_corr=None, arm_rev_acc=0.0, arm_grad=0.2, arm_fwd=0.95,
                     mdm_fwd=1.0) -> dict:
    """``rev_p`` / ``grad`` / ``pos_corr`` map a PE to the MDM's per-seed values; the ARM's are constants."""
    rev_p = rev_p or {"alibi": [0.9, 0.8, 0.85], "rope": [0.6, 0.5, 0.55], "learned": [0.3, 0.2, 0.25]}
    grad = grad or {pe: [0.8, 0.7, 0.75] for pe in rev_p}
    pos_corr = pos_corr or {"alibi": [1.0] * 3, "rope": [0.5, 0.4, 0.6], "learned": [-0.2, 0.1, 0.0]}
    out = {}
    for pe in rev_p:
        out[f"mdm/{pe}"] = group([0, 1, 2], {
            "rev_p": rev_p[pe], "initial_rev_p": [0.01] * 3, "rev_acc": [min(1.0, 1.1 * x) for x in rev_p[pe]],
            "fwd_acc": [mdm_fwd] * 3, "grad_cos_mean": grad[pe], "positional_corr": pos_corr[pe],
            "score_corr_train": [0.9] * 3})
        out[f"arm/{pe}"] = group([0, 1, 2], {
            "rev_p": [0.005] * 3, "initial_rev_p": [0.01] * 3, "rev_acc": [arm_rev_acc] * 3, "fwd_acc": [arm_fwd] * 3,
            "grad_cos_mean": [arm_grad] * 3})
    return out
