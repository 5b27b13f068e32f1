"""All per-model measurements of the induction study (uses only the reusable ``dlmlab.analysis`` modules)."""

from __future__ import annotations

from pathlib import Path

import torch

from dlmlab.analysis import ablation, circuits, emergence, fold, heads, induction, timestep
from dlmlab.objectives.mdlm import corrupt
from dlmlab.studies.induction.presets import InductionPreset
from dlmlab.tasks.repeated import RepeatedVocab


def accuracy_fn(objective: str, tokens: torch.Tensor, mask_id: int, per_seq: int, seed: int = 0):
    """metric(model) -> forward induction accuracy (AR: left context; DLM: both sides)."""
    if objective == "ar":
        return lambda m: induction.ar_accuracy(m, tokens, "forward")
    rows = induction.build_rows(tokens, mask_id, "forward", "both", per_seq, seed=seed)
    return lambda m: induction.masked_accuracy(m, rows, mask_id)


def lightly_masked(tokens: torch.Tensor, mask_id: int, rate: float = 0.15, seed: int = 0) -> torch.Tensor:
    """tokens with a fraction ``rate`` masked (the input a DLM's heads are scored on)."""
    g = torch.Generator().manual_seed(seed)
    return corrupt(tokens, torch.full((tokens.shape[0],), rate), mask_id, g)[0]


def analyse_model(model, objective: str, p: InductionPreset, vocab: RepeatedVocab, eval_tokens: torch.Tensor,
                  probe_tokens: torch.Tensor, run_dir: Path | None, progress: bool) -> dict:
    """Every measurement of one trained model -> JSON-able dict (tensors as nested lists)."""
    mid = vocab.mask_id
    model.eval()
    r: dict = {"objective": objective, "n_layers": len(model.blocks)}
    if objective == "ar":
        r["accuracy"] = induction.ar_table(model, eval_tokens)
        r["induction_scores"] = induction.ar_induction_scores(model, eval_tokens)
        head_input = eval_tokens
        ablate_ref = eval_tokens
    else:
        r["accuracy"] = induction.dlm_table(model, eval_tokens, mid, p.per_seq, seed=p.seed)
        r["induction_scores"] = induction.dlm_induction_scores(model, eval_tokens, mid, "forward",
                                                               max(1, p.per_seq // 2), seed=p.seed)
        r["induction_scores_reverse"] = induction.dlm_induction_scores(model, eval_tokens, mid, "reverse",
                                                                       max(1, p.per_seq // 2), seed=p.seed)
        r["local_window"] = induction.local_window(model, eval_tokens, mid, "forward", p.background, p.per_seq,
                                                   seed=p.seed)
        head_input = lightly_masked(eval_tokens, mid, seed=p.seed)
        ablate_ref = induction.build_rows(eval_tokens, mid, "forward", "both", p.per_seq, seed=p.seed).noisy
    r["prev_token_scores"] = heads.previous_token_scores(model, head_input)
    r["next_token_scores"] = heads.next_token_scores(model, head_input)

    metric = accuracy_fn(objective, eval_tokens, mid, p.per_seq, p.seed)
    means = ablation.head_means(model, ablate_ref)
    base, drop_mean = ablation.ablation_effects(model, metric, "mean", means)
    _, drop_zero = ablation.ablation_effects(model, metric, "zero")
    r["ablation"] = {"base": base, "mean_drop": drop_mean, "zero_drop": drop_zero}
    scores = r["induction_scores"]
    if len(model.blocks) >= 2:  # the induction head: highest score outside layer 0
        flat = int(scores[1:].argmax())
        layer, head = 1 + flat // scores.shape[1], flat % scores.shape[1]
        r["top_induction_head"] = [layer, head]
        r["top_induction_head_mean_drop"] = float(drop_mean[layer, head])
        r["top_induction_head_zero_drop"] = float(drop_zero[layer, head])

    # circuits on the folded (exactly linear) model, and the folding gap
    few = head_input[:64]  # the frozen scales and the logit gap need only a few sequences
    scales = fold.norm_scales(model, few)
    folded = fold.fold_layernorm(model, scales).eval()
    r["fold"] = {**fold.fold_gap(model, folded, few), "accuracy": base,
                 "folded_accuracy": float(metric(folded))}
    r["fold"]["accuracy_gap"] = r["fold"]["accuracy"] - r["fold"]["folded_accuracy"]
    if len(model.blocks) >= 2:
        comp = {k: circuits.composition_scores(folded, k) for k in circuits.COMPOSITIONS}
        li, hi_ = r["top_induction_head"]
        r["composition_into_top_head"] = {k: v[:, :, li, hi_] for k, v in comp.items()}  # [L, H] from earlier heads
    r["copying_scores"] = circuits.copying_scores(folded)
    qk_s = [circuits.qk_circuit(folded, i).svd()[1][:, :4] for i in range(len(model.blocks))]
    r["qk_top_singular_values"] = torch.stack(qk_s)  # [L, H, 4]
    r["ov_top_singular_values"] = torch.stack([circuits.ov_circuit(folded, i).svd()[1][:, :4]
                                               for i in range(len(model.blocks))])

    if objective == "dlm":
        rep = timestep.mask_rate_probe(model, probe_tokens, mid, seed=p.seed, t_range=(p.t_min, p.t_max))
        r["probe"] = {"points": rep.points, "r2": rep.r2, "train_r2": rep.train_r2}
        L = len(model.blocks)
        cands = list(range(1, L)) if L >= 2 else [L]  # residual points after blocks 0..L-2 (else the last)
        best = max(cands, key=lambda i: rep.r2[i])
        r["patch"] = {"point": rep.points[best], "probe_r2": rep.r2[best],
                      **timestep.patch_mask_rate(model, probe_tokens, mid, rep.points[best], rep.directions[best],
                                                 low=p.patch_low, high=p.patch_high, seed=p.seed)}

    if run_dir is not None:
        ev_tokens = eval_tokens[: max(8, eval_tokens.shape[0] // 2)]
        curve_metric = accuracy_fn(objective, ev_tokens, mid, max(1, p.per_seq // 2), p.seed)
        curve = emergence.checkpoint_curve(model, run_dir, curve_metric, progress=progress)
        r["emergence"] = {"curve": curve, **emergence.jump_step(curve)}
    return r
