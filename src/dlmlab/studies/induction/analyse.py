"""All per-model measurements of the induction study (uses only the reusable ``dlmlab.analysis`` modules)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from dlmlab.analysis import ablation, circuits, emergence, fold, head_sets, heads, induction, timestep
from dlmlab.objectives.mdlm import corrupt
from dlmlab.report.intervals import control_test
from dlmlab.studies.induction import controls
from dlmlab.studies.induction import heads_twoways as twoways
from dlmlab.studies.induction.claims import INDUCTION_THRESHOLD
from dlmlab.studies.induction.presets import InductionPreset
from dlmlab.studies.induction.train import StudyObjective
from dlmlab.tasks.repeated import RepeatedVocab

N_RANDOM_CONTROLS = 200  # the presets' control_draws: random head sets / shifts per control (MIN_CONTROL_DRAWS)
FULL_RANGE = (0.0, 1.0)  # the study's mask rates: the probe is also fitted over the whole range
LOCAL_RADIUS = 2  # the "local context" of a position: its neighbours at +-1 and +-2


def accuracy_fn(objective: StudyObjective, tokens: torch.Tensor, per_seq: int, seed: int = 0):
    """metric(model) -> forward induction accuracy (AR: left context; DLM: both sides)."""
    if not objective.masked:
        return lambda m: induction.ar_accuracy(m, tokens, "forward")
    mask_id = objective.mask_id
    rows = induction.build_rows(tokens, mask_id, "forward", "both", per_seq, seed=seed)
    return lambda m: induction.masked_accuracy(m, rows, mask_id)


def n_ids(p: InductionPreset, vocab: RepeatedVocab) -> int:
    """How many ids the repeated (evaluation) tokens are drawn from: the text vocabulary or the reserved ids."""
    return vocab.text_vocab if p.random_ids == "text" else p.n_random


def fold_and_measure(model, objective: StudyObjective, eval_tokens: torch.Tensor, dlm_rows: torch.Tensor | None,
                     metric, base: float | None = None) -> tuple[torch.nn.Module, dict]:
    """The study's folded, LayerNorm-free model and its accuracy beside the model's -> (folded model, dict).

    The LayerNorm scales are frozen per position (DLM: per position and mask / other token) at their mean over
    the first half of the evaluation inputs the accuracy is measured on (AR: ``eval_tokens`` [B, T]; DLM:
    ``dlm_rows`` [N, T], the rows with one masked target); the KL / arg-max gap is measured on the other half.
    ``single_scale_folded_accuracy``: the old fold (one frozen scale per norm), for comparison."""
    ref = dlm_rows if objective.masked else eval_tokens
    fit, held = ref[: max(1, ref.shape[0] // 2)], ref[ref.shape[0] // 2:]
    scales = fold.norm_scales(model, fit, per_position=True,
                              token_class=objective.mask_id if objective.masked else None)
    folded = fold.fold_ln_frozen_scale(model, scales).eval()  # a linearisation (scales frozen per position)
    one = fold.fold_ln_frozen_scale(model, fold.norm_scales(model, fit)).eval()  # one scale per norm (old)
    base = float(metric(model)) if base is None else base
    out = {**fold.fold_gap(model, folded, held), "accuracy": base, "folded_accuracy": float(metric(folded)),
           "scales": "per position" + (" and mask / other token" if objective.masked else "") +
                     " (mean over the first half of the evaluation inputs; gap on the second half)",
           "single_scale_folded_accuracy": float(metric(one))}
    out["accuracy_gap"] = out["accuracy"] - out["folded_accuracy"]
    return folded, out


def untrained_like(model, p: InductionPreset, vocab: RepeatedVocab, objective: StudyObjective):
    """The model's shape at initialisation (the seed of training), on the model's device."""
    from dlmlab.models import Transformer
    from dlmlab.studies.induction.train import model_config

    torch.manual_seed(p.seed)
    return Transformer(model_config(p, vocab, len(model.blocks), objective)).to(heads.model_device(model)).eval()


def lightly_masked(tokens: torch.Tensor, mask_id: int, rate: float = 0.15, seed: int = 0) -> torch.Tensor:
    """tokens with a fraction ``rate`` masked (the input a DLM's heads are scored on)."""
    g = torch.Generator().manual_seed(seed)
    return corrupt(tokens, torch.full((tokens.shape[0],), rate), mask_id, g)[0]


def analyse_model(model, objective: StudyObjective, p: InductionPreset, vocab: RepeatedVocab, eval_tokens: torch.Tensor,
                  probe_tokens: torch.Tensor, run_dir: Path | None, progress: bool,
                  text_tokens: torch.Tensor | None = None) -> dict:
    """Every measurement of one trained model -> JSON-able dict (tensors as nested lists).

    ``objective``: the model's objective (its label is written as ``objective``, the context of its headline
    accuracy as ``context``). eval_tokens [B, T] repeated sequences; probe_tokens [B', T] held-out rows of the
    training mix; text_tokens [B'', T] held-out text windows (head scores on text, as extra evidence).
    """
    mid = objective.mask_id
    model.eval()
    r: dict = {"objective": objective.label, "context": objective.context, "n_layers": len(model.blocks),
               "seq_len": int(eval_tokens.shape[1])}
    r["chance"] = 1.0 / n_ids(p, vocab)  # the repeated tokens' ids are uniform over n_ids ids
    B = int(eval_tokens.shape[0])
    if not objective.masked:
        r["accuracy"] = induction.ar_table(model, eval_tokens)
        r["accuracy_per_seq"] = {"forward": {"left": induction.ar_accuracy_per_seq(model, eval_tokens, "forward")}}
        r["induction_scores"] = induction.ar_induction_scores(model, eval_tokens)
        head_input = eval_tokens
        ablate_ref = eval_tokens
    else:
        r["accuracy"] = induction.dlm_table(model, eval_tokens, mid, p.per_seq, seed=p.seed)
        r["accuracy_per_seq"] = {"forward": {c: induction.dlm_accuracy_per_seq(model, eval_tokens, mid, "forward", c,
                                                                               p.per_seq, seed=p.seed)
                                             for c in ("left", "both")}}
        r["induction_scores"] = induction.dlm_induction_scores(model, eval_tokens, mid, "forward",
                                                               max(1, p.per_seq // 2), seed=p.seed)
        r["induction_scores_reverse"] = induction.dlm_induction_scores(model, eval_tokens, mid, "reverse",
                                                                       max(1, p.per_seq // 2), seed=p.seed)
        r["local_window"] = induction.local_window(model, eval_tokens, mid, "forward", p.background, p.per_seq,
                                                   seed=p.seed)
        r["gains"] = {}
        for d in induction.DIRECTIONS:
            g = induction.context_gains(model, eval_tokens, mid, d, p.per_seq, seed=p.seed)
            r["gains"][d] = {**{c: float(g[c].mean()) for c in induction.CONTEXTS},
                             "neither_log_prob": float(g["neither"].mean()), "ratio": induction.additivity(g),
                             "per_seq": {c: induction.per_sequence(g[c], B) for c in induction.CONTEXTS}}
        head_input = lightly_masked(eval_tokens, mid, seed=p.seed)
        ablate_ref = induction.build_rows(eval_tokens, mid, "forward", "both", p.per_seq, seed=p.seed).noisy
    lo_id = 0 if p.random_ids == "text" else vocab.lo
    r["few_ids"] = controls.few_ids_accuracy(model, objective, p.few_ids, B, int(eval_tokens.shape[1]) // 2, lo_id,
                                             p.per_seq, p.seed)
    local = heads.local_offset_scores(model, head_input, LOCAL_RADIUS)  # {offset: [L, H]}
    r["prev_token_scores"], r["next_token_scores"] = local[-1], local[1]
    r["local_offset_scores"] = {str(o): v for o, v in local.items()}
    if text_tokens is not None:
        text_in = lightly_masked(text_tokens, mid, seed=p.seed) if objective.masked else text_tokens
        r["prev_token_scores_text"] = heads.previous_token_scores(model, text_in)
        r["next_token_scores_text"] = heads.next_token_scores(model, text_in)
    # the heads measured two ways: on 15%-masked (DLM) and on unmasked random / text rows, a few rows each
    tw_t0 = time.perf_counter()
    tw_inputs = twoways.twoway_inputs(eval_tokens, head_input if objective.masked else None, text_tokens)
    tw_final = twoways.all_scores(model, tw_inputs, objective)
    tw_seconds = time.perf_counter() - tw_t0
    init = untrained_like(model, p, vocab, objective)  # control: the same shape at initialisation
    r["prev_token_scores_init"] = heads.previous_token_scores(init, head_input)
    r["next_token_scores_init"] = heads.next_token_scores(init, head_input)

    metric = accuracy_fn(objective, eval_tokens, p.per_seq, p.seed)
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
        ind = head_sets.heads_above(scores, INDUCTION_THRESHOLD, min_layer=1)
        pool = head_sets.layer_pool(len(model.blocks), scores.shape[1], min_layer=1)
        test = head_sets.set_ablation_test(model, metric, ind, pool, means, "mean", p.control_draws, seed=p.seed)
        r["induction_set_ablation"] = {**test.to_dict(), "threshold": INDUCTION_THRESHOLD,
                                       "pool": "every head of layers >= 1"}
        per_seq = controls.per_seq_fn(objective, eval_tokens, p.per_seq, p.seed)  # the rows of ``metric``
        r["induction_set_ablation"]["per_seq"] = controls.set_ablation_per_seq(
            model, per_seq, test.heads, test.random_sets, test.random_drops, means)

    # circuits on the folded (linear) model, and the folding gap
    folded, r["fold"] = fold_and_measure(model, objective, eval_tokens, ablate_ref, metric, base)
    if len(model.blocks) >= 2:
        comp = {k: circuits.composition_scores(folded, k) for k in circuits.COMPOSITIONS}
        li, hi_ = r["top_induction_head"]
        r["composition_into_top_head"] = {k: v[:, :, li, hi_] for k, v in comp.items()}  # [L, H] from earlier heads
        fit = ablate_ref[: max(1, ablate_ref.shape[0] // 2)]  # the rows the trained model's fold used
        r["composition_into_top_head_init"] = controls.composition_at_init(init, objective, fit, li, hi_)
        r["composition_convention"] = ("TransformerLens: ||W_OV^1 W_QK^2||_F / (||W_OV^1||_F ||W_QK^2||_F) (Q), "
                                       "W_QK^2 transposed (K), on the LayerNorm-folded model")
    r["copying_scores"] = circuits.copying_scores(folded)
    qk_s = [circuits.qk_circuit(folded, i).svd()[1][:, :4] for i in range(len(model.blocks))]
    r["qk_top_singular_values"] = torch.stack(qk_s)  # [L, H, 4]
    r["ov_top_singular_values"] = torch.stack([circuits.ov_circuit(folded, i).svd()[1][:, :4]
                                               for i in range(len(model.blocks))])

    if objective.masked:  # the mask-rate probe over the training range and over the study's full range
        rep = timestep.mask_rate_probe(model, probe_tokens, mid, seed=p.seed, t_range=(p.t_min, p.t_max))
        r["probe"] = {"points": rep.points, "r2": rep.r2, "train_r2": rep.train_r2, "r2_pooled": rep.r2_pooled,
                      "r2_control": rep.r2_control, "t_range": [p.t_min, p.t_max],
                      "rmse": [controls.probe_rmse(x, probe_tokens, mid, p.seed, (p.t_min, p.t_max)) for x in rep.r2],
                      "rmse_control": controls.probe_rmse(rep.r2_control[1], probe_tokens, mid, p.seed,
                                                          (p.t_min, p.t_max))}
        full = timestep.mask_rate_probe(model, probe_tokens, mid, seed=p.seed, t_range=FULL_RANGE)
        r["probe_full_range"] = {"points": full.points, "r2": full.r2, "train_r2": full.train_r2,
                                 "r2_pooled": full.r2_pooled, "r2_control": full.r2_control,
                                 "t_range": list(FULL_RANGE)}
        r["patch"] = timestep.mean_shift_patch(model, probe_tokens, mid, rep.points[1], p.patch_low, p.patch_high,
                                               p.control_draws, seed=p.seed)
        r["patch"]["control"] = control_test(r["patch"]["delta"], r["patch"]["random_deltas"],
                                             min_draws=min(p.control_draws, N_RANDOM_CONTROLS)).as_dict()

    if run_dir is not None:
        ev_tokens = eval_tokens[: max(8, eval_tokens.shape[0] // 2)]
        curve_metric = accuracy_fn(objective, ev_tokens, max(1, p.per_seq // 2), p.seed)
        metrics = {"accuracy": curve_metric,
                   "prev_layer0": lambda m: float(heads.previous_token_scores(m, head_input[:32])[0].max())}
        if objective.masked:  # the claims' other quantities over training: what explains a failing claim
            metrics["next_layer0"] = lambda m: float(heads.next_token_scores(m, head_input[:32])[0].max())
            metrics["probe_r2_block0"] = lambda m: timestep.mask_rate_probe(
                m, probe_tokens[:128], mid, seed=p.seed, t_range=(p.t_min, p.t_max)).r2[1]
        names = list(metrics)
        tw_clock = [0.0]

        def tw_metric(m):  # the two-ways head scores at this checkpoint (timed: its share of the study's cost)
            t = time.perf_counter()
            out = twoways.all_scores(m, tw_inputs, objective)
            tw_clock[0] += time.perf_counter() - t
            return out

        # one pass over the checkpoints: the same values as emergence.checkpoint_curves(model, run_dir, metrics)
        rows = emergence.checkpoint_curve(model, run_dir, lambda m: [*(float(metrics[n](m)) for n in names),
                                                                     tw_metric(m)], progress)
        curves = {n: [(step, vals[i]) for step, vals in rows] for i, n in enumerate(names)}
        tw_curves = [(step, vals[-1]) for step, vals in rows]
        tw_seconds += tw_clock[0]
        r["emergence"] = {"curve": curves["accuracy"], **emergence.jump_step(curves["accuracy"]),
                          "rise": emergence.rise_width(curves["accuracy"]), "run_steps": p.steps,
                          "study_step_window": p.study_step_window,
                          "curves": {k: v for k, v in curves.items() if k != "accuracy"}}
    else:
        tw_curves = []
    r["heads_twoways"] = {
        "inputs": {"masked": "the first rows of the evaluation input (15% masked)", "random": "the first evaluation "
                   "rows [r r], unmasked", "text": "[w w]: a held-out text window w of half the length, repeated, "
                   "unmasked"},
        "n_seqs": {c: int(x.shape[0]) for c, x in tw_inputs.items()},
        "final": tw_final,
        "summary": twoways.summarise(tw_final, tw_curves, len(model.blocks), r.get("emergence")),
        "seconds": tw_seconds,  # final scores + every checkpoint's (one forward per input each)
    }
    return r
