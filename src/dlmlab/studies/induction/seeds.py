"""The summary sentence each induction claim tests (issue 34): ``FILE:LINE`` of ``../shared/seeds``, in our words.

The study is summarised twice (000: Italian, 004: Korean; the same content line for line); the references
point at the Italian summary.  ``study_effect`` is set only where the summary gives a number for the claim's
quantity (the probe's R^2 and the emergence step window); ``deviation`` says where a claim measures something
other than the sentence, or at another level, and why.
"""

from __future__ import annotations

from dlmlab.report.seeds import SeedRef

S = "000_53ecdc8713c33aa0.txt"

SEED_REFS: dict[str, SeedRef] = {
    "dlm_beats_ar_with_both_sides": SeedRef(
        f"{S}:35", "the diffusion model does better than the causal model only when the masked target has both of "
                   "its immediate neighbours in view",
        deviation="judged on an evaluation where the AR is below its ceiling (repeats from few distinct ids, the "
                  "id count picked from the AR's accuracy alone), since on distinct ids both models are near 1"),
    "left_only_not_better_than_ar": SeedRef(
        f"{S}:34", "given only the context to its left, the diffusion model matches the causal model or falls "
                   "below it"),
    "both_approx_left_plus_right": SeedRef(
        f"{S}:36", "the two-sided induction score is close to the left-only score added to the right-only score",
        deviation="scores are log-probability gains over a no-source baseline, and each side must carry a share "
                  "of the two-sided gain (else an additive split is vacuous)"),
    "two_layers_needed": SeedRef(
        f"{S}:47", "one attention layer is not enough for induction: one layer writes the neighbour features and "
                   "a later one reads them"),
    "prev_and_next_token_heads_in_layer0": SeedRef(
        f"{S}:26", "in the first layer some heads look at the token just left of the mask and others at the "
                   "token just right of it, writing that local context into the residual stream"),
    "induction_heads_ablation_drop": SeedRef(
        f"{S}:14", "mean-ablating single attention heads shows which heads induction causally needs",
        deviation="the induction heads are ablated as one set and compared, sequence by sequence, with the other "
                  "same-size set of later-layer heads whose ablation hurts most (paired interval over seeds)"),
    "mask_rate_probe_r2": SeedRef(
        f"{S}:42", "a linear read-out of the residual stream after the first attention layer recovers the "
                   "fraction of masked tokens well, with an R^2 between roughly 0.82 and 0.91",
        study_effect={"r2_lo": 0.82, "r2_hi": 0.91},
        deviation="judged by RMSE in mask-rate units over the training rates (independent of the label range), at "
                  "the RMSE an R^2 of 0.82 implies for rates uniform on [0, 1]; the full-range R^2 is the number "
                  "comparable to the summary's"),
    "mask_rate_patch_raises_entropy": SeedRef(
        f"{S}:43", "moving the mask-rate direction of a heavily corrupted input into a lightly corrupted one "
                   "makes the prediction at the masked position more uncertain"),
    "local_window_sensitivity": SeedRef(
        f"{S}:48", "induction depends on about five positions around the target (two neighbours per side); "
                   "hiding those neighbours costs much accuracy even when few other tokens are masked"),
    "q_and_k_composition_in_induction_heads": SeedRef(
        f"{S}:28", "the induction heads build their query from the mask's neighbourhood and their key from the "
                   "source's neighbourhood (Q- and K-composition with earlier heads), then copy through OV",
        deviation="composition is compared with the model's other layer-0 heads and with the same scores of the "
                  "model at initialisation (a cosine-like score is well above 0 for random weights)"),
    "induction_emerges_abruptly": SeedRef(
        f"{S}:47", "induction appears suddenly during training, at roughly eight to twenty-four thousand steps",
        study_effect={"step_lo": 8000.0, "step_hi": 24000.0},
        deviation="the step window is judged only at the paper preset (the study's recipe); the cpu preset's "
                  "steps do not map onto the study's"),
    "mask_rate_steering": SeedRef(
        None, "steering the mask-rate direction during real threshold decoding changes per-step entropy and "
              "tokens committed per step (tests the implicit timestep beyond what the summary states)",
        extension=True),
}
