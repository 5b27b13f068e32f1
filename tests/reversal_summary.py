"""A built reversal summary (three seeds per group) for the claim tests: the study's pattern by default."""

from __future__ import annotations

from dlmlab.studies.reversal.summary import group

PES, KINDS = ["learned", "rope", "alibi"], ["mdm", "arm"]


def reversal_summary(rev_p=None, grad=None, pos_corr=None, arm_rev_acc=0.0, arm_grad=0.2, arm_fwd=0.95,
                     mdm_fwd=1.0, wv_wo_grad=None) -> dict:
    """``rev_p`` / ``grad`` / ``pos_corr`` map a PE to the MDM's per-seed values (``grad``: the storage-column
    gradient cosine once the facts are learned, the claim's quantity; at step 0 it is 1.0; ``wv_wo_grad``: the whole-W_v/W_o cosine, evidence only, default the
    same as ``grad``); the ARM's are constants.  ``mdm_fwd`` / ``arm_fwd``: a number (every seed) or per-seed list."""
    rev_p = rev_p or {"alibi": [0.9, 0.8, 0.85], "rope": [0.6, 0.5, 0.55], "learned": [0.3, 0.2, 0.25]}
    grad = grad or {pe: [0.8, 0.7, 0.75] for pe in rev_p}
    wv_wo_grad = wv_wo_grad or grad
    pos_corr = pos_corr or {"alibi": [1.0] * 3, "rope": [0.8, 0.7, 0.75], "learned": [-0.2, 0.1, 0.0]}
    seeds = lambda x: list(x) if isinstance(x, (list, tuple)) else [x] * 3  # noqa: E731
    out = {}
    for pe in rev_p:
        out[f"mdm/{pe}"] = group([0, 1, 2], {
            "rev_p": rev_p[pe], "initial_rev_p": [0.01] * 3, "rev_acc": [min(1.0, 1.1 * x) for x in rev_p[pe]],
            "fwd_acc": seeds(mdm_fwd), "storage_grad_cos_learned": grad[pe], "storage_grad_cos_init": [1.0] * 3,
            "storage_grad_cos_mean": grad[pe], "grad_cos_mean": wv_wo_grad[pe],
            "positional_corr": pos_corr[pe], "score_corr_train": [0.9] * 3, "rev_auc": [0.5 * x for x in rev_p[pe]]})
        out[f"arm/{pe}"] = group([0, 1, 2], {
            "rev_p": [0.005] * 3, "initial_rev_p": [0.01] * 3, "rev_acc": [arm_rev_acc] * 3, "fwd_acc": seeds(arm_fwd),
            "storage_grad_cos_mean": [0.0] * 3, "storage_grad_cos_learned": [0.0] * 3, "storage_grad_cos_init": [0.0] * 3,
            "grad_cos_mean": [arm_grad] * 3})
    return out


def pair_summary(rev_p=None, mdm_fwd=1.0) -> dict:
    """A fixed-layout pair-task summary (MDM only): ``rev_p`` maps a PE to per-seed final reverse p."""
    rev_p = rev_p or {"alibi": [0.99, 0.98, 0.985], "rope": [0.9, 0.85, 0.88], "learned": [0.5, 0.4, 0.45]}
    return {f"mdm/{pe}": group([0, 1, 2], {"rev_p": v, "rev_acc": [min(1.0, 1.05 * x) for x in v],
                                           "fwd_acc": [mdm_fwd] * 3, "initial_rev_p": [0.01] * 3})
            for pe, v in rev_p.items()}
