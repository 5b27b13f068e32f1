"""Train one model (MDM or ARM, one positional encoding, one seed) forward-only on the positional relation
task and measure it: forward/reverse accuracy and probability and the storage-gradient cosine over
training; at the end the storage-routing split and the attention-score signatures by distance."""

from __future__ import annotations

import dataclasses
import math
import time

import torch

from dlmlab.studies.reversal.attention_correlation import distance_profile, score_correlation
from dlmlab.studies.reversal.gradient_alignment import (parameter_gradient_cosine, per_query_gradient_cosine,
                                                        storage_gradient_cosine, storage_modules)
from dlmlab.studies.reversal.queries import query_eval
from dlmlab.studies.reversal.storage_routing import storage_matrix, storage_margin, storage_routing
from dlmlab.models import Transformer
from dlmlab.objectives import GivenMaskObjective, MaskedDiffusionObjective
from dlmlab.studies.reversal.presets import ReversalPreset
from dlmlab.tasks.positional_relations import Layout, PositionalRelations
from dlmlab.training import train


def build_model(preset: ReversalPreset, task: PositionalRelations, kind: str, positions: str, seed: int) -> Transformer:
    """The study's model: identical for MDM and ARM except the attention mask."""
    cfg = dataclasses.replace(
        preset.model, vocab_size=task.vocab_size, positions=positions,
        attn_mask="bidirectional" if kind.startswith("mdm") else "causal", max_seq_len=task.seq_len,
    )
    torch.manual_seed(seed)
    return Transformer(cfg)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _dev(model) -> torch.device:
    return next(model.parameters()).device


def queries(task: PositionalRelations, kind: str, lay: Layout, device=None):
    """(forward, reverse) queries of a model kind on layout ``lay``: MDM "[M] r.. B" / "B r.. [M]",
    ARM "A r.." / "B r.."."""
    if kind.startswith("mdm"):
        f, r = task.mdm_forward(lay), task.mdm_reverse(lay)
    else:
        f, r = task.arm_forward(lay), task.arm_reverse(lay)
    return (f, r) if device is None else (f.to(device), r.to(device))


def make_objective(task: PositionalRelations, kind: str, batch_size: int):
    """(batches, objective) for forward-only training (see ``ReversalPreset.kinds``).

    mdm: NLL of A at the mask of "[M] r.. B" (:class:`~dlmlab.objectives.GivenMaskObjective` with the task's
    mask id); arm: NLL of B read at the position before it in "A r.." (the given-mask objective without a
    mask: next token); mdm_mdlm: the MDLM loss on random masks of the whole document."""
    if kind == "mdm_mdlm":
        objective = MaskedDiffusionObjective(task.mask_id)
    else:
        objective = GivenMaskObjective(task.mask_id if kind.startswith("mdm") else None)

    def batches(step: int, gen: torch.Generator):
        lay = task.sample_layout(batch_size, gen)
        if kind == "mdm_mdlm":
            return task.documents(lay)
        q = queries(task, kind, lay)[0]
        return {"tokens": q.tokens, "query_pos": q.query_pos, "target": q.target, "evidence_pos": q.evidence_pos}

    return batches, objective


def track(model: Transformer, task: PositionalRelations, kind: str, lay: Layout) -> dict:
    """Metrics logged over training on the fixed evaluation layout: forward/reverse acc & p(correct); the
    study's storage-gradient alignment ``storage_grad_cos``: per fact, the cosine of the forward- and
    reverse-NLL gradients on the storage column Y[:, B] (:func:`storage_gradient_cosine`), mean over facts;
    ``grad_cos`` (the definition before issue 27): the per-fact autograd cosine on the whole W_v, W_o;
    the cosine of the batch gradients on W_v, W_o; evidence alpha."""
    fwd, rev = queries(task, kind, lay, _dev(model))
    ex = (task.mask_id,)
    f, r = query_eval(model, fwd, ex), query_eval(model, rev, ex)
    mods = storage_modules(model)
    params = {f"{n}.{k}": p for n, m in mods.items() for k, p in m.named_parameters()}
    srf, srr = storage_routing(model, fwd, exclude=ex), storage_routing(model, rev, exclude=ex)
    return {
        "fwd_acc": f["acc"], "fwd_p": f["p_correct"], "rev_acc": r["acc"], "rev_p": r["p_correct"],
        "storage_grad_cos": float(storage_gradient_cosine(model, fwd, rev, exclude=ex, splits=(srf, srr)).mean()),
        "grad_cos": float(per_query_gradient_cosine(model, fwd, rev, mods, exclude=ex).mean()),
        "param_cos": parameter_gradient_cosine(model, fwd, rev, params, exclude=ex),
        "fwd_alpha": float(srf.evidence_alpha.sum(1).mean()), "rev_alpha": float(srr.evidence_alpha.sum(1).mean()),
    }


def _head(q, k: int):
    """The first ``k`` queries of ``q`` (all when ``k`` is 0)."""
    return q if not k else q.subset(torch.arange(min(k, len(q))))


def first_facts(lay: Layout, k: int) -> Layout:
    """The examples of ``lay`` on the first ``k`` facts (all when ``k`` is 0)."""
    if not k:
        return lay
    keep = lay.fact < k
    return Layout(lay.fact[keep], lay.d[keep], lay.p[keep], lay.dis_pos[keep], lay.dis_ids[keep])


def attention_signatures(model: Transformer, task: PositionalRelations, max_distance: int,
                         eval_facts: int = 0) -> dict:
    """MDM probes at distances 1..max_distance: the forward/reverse evidence-score correlation across facts
    (full score, per distance) and the positional part (facts averaged out) correlated across distances
    (``eval_facts``: probe the first k facts only; 0: all)."""
    dev = _dev(model)
    pairs = {d: (_head(task.probes(d, reverse=False), eval_facts).to(dev),
                 _head(task.probes(d, reverse=True), eval_facts).to(dev))
             for d in range(1, max_distance + 1)}
    prof = distance_profile(model, pairs)
    return {
        "corr_by_distance": {d: score_correlation(model, f, r).pooled for d, (f, r) in pairs.items()},
        "positional_corr": prof.correlation,
        "positional_corr_per_head": prof.per_head.tolist(),
        "profile_forward": prof.forward.tolist(), "profile_reverse": prof.reverse.tolist(),
    }


def final_diagnostics(model: Transformer, task: PositionalRelations, kind: str, lay: Layout, max_distance: int,
                      signatures: bool = True, eval_facts: int = 0) -> dict:
    """Storage-routing split of the target's logit margin (vs. the other entities of its type) in the forward
    and the reverse query, the storage margin and (MDM, ``signatures``) the attention signatures."""
    dev = _dev(model)
    fwd, rev = queries(task, kind, lay, dev)
    ex = (task.mask_id,)
    out = {}
    for name, q in (("fwd", fwd), ("rev", rev)):
        contrast = task.b_ids if (kind == "arm" and name == "fwd") else task.a_ids  # the target's entity type
        sr = storage_routing(model, q, exclude=ex, contrast=contrast.to(dev))
        out[f"{name}_logit"] = float(sr.logit.mean())
        out[f"{name}_evidence_alpha"] = float(sr.evidence_alpha.sum(1).mean())
        out[f"{name}_evidence_routed"] = float((sr.evidence_alpha * sr.evidence_storage).sum(1).mean())
        out[f"{name}_evidence_storage"] = float(sr.evidence_storage.sum(1).mean())
    Y = storage_matrix(model, task.b_ids, task.a_ids)  # [H, N_A, N_B]: does B single out its A?
    out["storage_margin"] = float(storage_margin(Y, torch.arange(task.cfg.n_pairs, device=Y.device)).mean())
    if kind.startswith("mdm") and signatures:
        out.update(attention_signatures(model, task, max_distance, eval_facts))
    return out


def run_one(preset: ReversalPreset, kind: str, positions: str, seed: int, progress: bool = True) -> dict:
    """Train one model forward-only on ``preset.task``; returns {kind, positions, seed, part, history[...],
    final{...}, diagnostics{...}, cpu_seconds} (``cpu_seconds``: this process's CPU time for the run)."""
    c0 = time.process_time()
    task = PositionalRelations(preset.task, seed)
    lay = first_facts(task.eval_layout(preset.eval_per_fact, seed), preset.eval_facts)
    model = build_model(preset, task, kind, positions, seed).to(resolve_device(preset.device))
    tcfg = dataclasses.replace(preset.train, seed=seed, eval_every=preset.train.log_every, progress=progress)
    batches, objective = make_objective(task, kind, tcfg.batch_size)
    model.eval()
    history = [{"step": 0, **track(model, task, kind, lay)}]
    rows = train(model, tcfg, batches, objective, eval_fn=lambda m, step: track(m, task, kind, lay),
                 desc=f"{kind}/{positions}/s{seed}")
    for row in rows:
        history.append({"step": row["step"], "loss": row.get("loss"),
                        **{k[5:]: v for k, v in row.items() if k.startswith("eval_")}})
    final = history[-1]
    out = {
        "kind": kind, "positions": positions, "seed": seed, "part": preset.part,
        "chance": 1.0 / task.n_choices,
        "history": history,
        "final": {k: final[k] for k in ("fwd_acc", "fwd_p", "rev_acc", "rev_p", "storage_grad_cos", "grad_cos")},
        "initial": {k: history[0][k] for k in ("fwd_acc", "fwd_p", "rev_acc", "rev_p")},
        "initial_rev_p": history[0]["rev_p"],
        "diagnostics": final_diagnostics(model, task, kind, lay, preset.max_distance,
                                         signatures=preset.part != "pair", eval_facts=preset.eval_facts),
        "params": model.num_params(),
        "final_loss": final.get("loss", math.nan),
    }
    out["cpu_seconds"] = time.process_time() - c0
    return out
