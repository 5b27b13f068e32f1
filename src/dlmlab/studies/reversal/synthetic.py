"""Train one model (MDM or ARM, one positional encoding, one seed) forward-only on synthetic facts
and measure it: forward/reverse accuracy and probability over training, storage-column gradient
cosine over training, and at the end the storage-routing split and attention-score correlation."""

from __future__ import annotations

import dataclasses
import math

import torch

from dlmlab.analysis.attention_correlation import score_correlation
from dlmlab.analysis.gradient_alignment import parameter_gradient_cosine, storage_gradient_cosine
from dlmlab.analysis.reversal import query_eval
from dlmlab.analysis.storage_routing import storage_matrix, storage_margin, storage_routing
from dlmlab.models import Transformer
from dlmlab.objectives import ar_loss, given_mask_loss, mdlm_loss
from dlmlab.objectives.schedule import sample_t
from dlmlab.studies.reversal.presets import ReversalPreset
from dlmlab.tasks.relations import SyntheticRelations
from dlmlab.training import train


def build_model(preset: ReversalPreset, task: SyntheticRelations, kind: str, positions: str, seed: int) -> Transformer:
    """The study's model: identical for MDM and ARM except the attention mask."""
    cfg = dataclasses.replace(
        preset.model, vocab_size=task.vocab_size, positions=positions,
        attn_mask="bidirectional" if kind.startswith("mdm") else "causal",
        max_seq_len=max(task.seq_len, preset.max_distance + 1),
    )
    torch.manual_seed(seed)
    return Transformer(cfg)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _dev(model) -> torch.device:
    return next(model.parameters()).device


def queries(task: SyntheticRelations, kind: str, device=None):
    """(forward, reverse) queries of a model kind: MDM "[M] is B"/"B is [M]", ARM "A is"/"B is"."""
    if kind.startswith("mdm"):
        f, r = task.mdm_forward(), task.mdm_reverse()
    else:
        f, r = task.arm_forward(), task.arm_reverse()
    return (f, r) if device is None else (f.to(device), r.to(device))


def make_objective(task: SyntheticRelations, kind: str, batch_size: int):
    """(make_batch, loss_fn) for forward-only training on the facts "A is B" (see ``ReversalPreset.kinds``)."""
    mdm_objective = "mdlm" if kind == "mdm_mdlm" else "given_mask"

    def make_batch(step: int, gen: torch.Generator) -> dict:
        docs = task.facts(task.sample(batch_size, gen))
        if mdm_objective == "mdlm":
            return {"tokens": docs, "t": sample_t(batch_size, gen), "noise": torch.rand(docs.shape, generator=gen)}
        return {"tokens": docs}

    def loss_fn(model, batch):
        x = batch["tokens"].to(_dev(model))
        if kind == "arm":
            return ar_loss(model, x)
        if mdm_objective == "mdlm":
            return mdlm_loss(model, x, task.mask_id, t=batch["t"].to(x.device), noise=batch["noise"].to(x.device))
        masked = torch.zeros_like(x, dtype=torch.bool)
        masked[:, 0] = True  # "[M] is B" -> A
        return given_mask_loss(model, x, masked, task.mask_id)

    return make_batch, loss_fn


def track(model: Transformer, task: SyntheticRelations, kind: str) -> dict:
    """Metrics logged over training: forward/reverse acc & p(correct), storage-column gradient cosine,
    full-parameter gradient cosine, evidence alpha."""
    fwd, rev = queries(task, kind, _dev(model))
    ex = (task.mask_id,)
    f, r = query_eval(model, fwd, ex), query_eval(model, rev, ex)
    cos = storage_gradient_cosine(model, fwd, rev, exclude=ex)
    srf, srr = storage_routing(model, fwd, exclude=ex), storage_routing(model, rev, exclude=ex)
    return {
        "fwd_acc": f["acc"], "fwd_p": f["p_correct"], "rev_acc": r["acc"], "rev_p": r["p_correct"],
        "grad_cos": float(cos.mean()),
        "param_cos": parameter_gradient_cosine(model, fwd, rev, exclude=ex),
        "fwd_alpha": float(srf.evidence_alpha.sum(1).mean()), "rev_alpha": float(srr.evidence_alpha.sum(1).mean()),
    }


def correlation_by_distance(model: Transformer, task: SyntheticRelations, max_distance: int) -> dict:
    """Pooled forward/reverse evidence-score correlation for MDM probes at distances 1..max_distance."""
    out = {}
    for d in range(1, max_distance + 1):
        dev = _dev(model)
        c = score_correlation(model, task.mdm_forward(distance=d).to(dev), task.mdm_reverse(distance=d).to(dev))
        out[d] = c.pooled
    return out


def final_diagnostics(model: Transformer, task: SyntheticRelations, kind: str, max_distance: int) -> dict:
    """Storage-routing split of the logit margin of the target (vs. the other entities of its type) in the
    forward and the reverse query, storage margin,
    and (MDM) attention-score correlation by distance."""
    dev = _dev(model)
    fwd, rev = queries(task, kind, dev)
    ex = (task.mask_id,)
    out = {}
    for name, q in (("fwd", fwd), ("rev", rev)):
        contrast = task.b_ids if (kind == "arm" and name == "fwd") else task.a_ids  # the target's entity type
        sr = storage_routing(model, q, exclude=ex, contrast=contrast.to(dev))
        out[f"{name}_logit"] = float(sr.logit.mean())
        out[f"{name}_evidence_alpha"] = float(sr.evidence_alpha.sum(1).mean())
        out[f"{name}_evidence_routed"] = float((sr.evidence_alpha * sr.evidence_storage).sum(1).mean())
        out[f"{name}_evidence_storage"] = float(sr.evidence_storage.sum(1).mean())
    # position-invariant storage Y[A, B] of the reverse evidence: does B single out its A?
    Y = storage_matrix(model, task.b_ids, task.a_ids)  # [H, N_A, N_B]
    out["storage_margin"] = float(storage_margin(Y, torch.arange(task.cfg.n_pairs, device=Y.device)).mean())
    if kind.startswith("mdm"):
        out["corr_by_distance"] = correlation_by_distance(model, task, max_distance)
        out["corr_train_distance"] = out["corr_by_distance"][task.cfg.gap + 1]
    return out


def run_one(preset: ReversalPreset, kind: str, positions: str, seed: int, progress: bool = True) -> dict:
    """Train one model forward-only; returns {kind, positions, seed, history[...], final{...}, diagnostics{...}}."""
    task = SyntheticRelations(preset.task, seed)
    model = build_model(preset, task, kind, positions, seed).to(resolve_device(preset.device))
    tcfg = dataclasses.replace(preset.train, seed=seed, eval_every=preset.train.log_every, progress=progress)
    make_batch, loss_fn = make_objective(task, kind, tcfg.batch_size)
    model.eval()
    history = [{"step": 0, **track(model, task, kind)}]
    rows = train(model, tcfg, make_batch, loss_fn, eval_fn=lambda m, step: track(m, task, kind),
                 desc=f"{kind}/{positions}/s{seed}")
    for row in rows:
        history.append({"step": row["step"], "loss": row.get("loss"),
                        **{k[5:]: v for k, v in row.items() if k.startswith("eval_")}})
    final = history[-1]
    return {
        "kind": kind, "positions": positions, "seed": seed,
        "chance": 1.0 / (task.vocab_size - 1),
        "history": history,
        "final": {k: final[k] for k in ("fwd_acc", "fwd_p", "rev_acc", "rev_p", "grad_cos")},
        "initial_rev_p": history[0]["rev_p"],
        "diagnostics": final_diagnostics(model, task, kind, preset.max_distance),
        "params": model.num_params(),
        "final_loss": final.get("loss", math.nan),
    }
