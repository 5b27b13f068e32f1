"""The summary sentence each state claim tests (issue 34): ``FILE:LINE`` of 002_954919acf31821b2.txt, in our words.

Effects are accuracy fractions (the summary's percentage points / 100); a Conv1D "drop" is accuracy with Conv1D
minus without, so the summary's -12.64 pp change on S3 is a drop of +0.1264 here.
"""

from __future__ import annotations

from dlmlab.report.seeds import SeedRef

_F = "002_954919acf31821b2.txt"

SEED_REFS: dict[str, SeedRef] = {
    "prefix_tasks_late_in_recurrent": SeedRef(
        f"{_F}:43",
        "On the prefix tasks (parity, S3) the linear readout of the state in Mamba and the LSTM rises abruptly "
        "into the final block of the four (layer 3 counted from 0), while Transformers climb over blocks 1 to 3.",
        deviation="'abrupt rise into the final block' is read as: the largest layer-to-layer probe gain enters the "
                  "last block (no size is given); GRU shown beside, not counted; Mamba cells the cpu budget cannot "
                  "train are not_run (budget)"),
    "prefix_tasks_gradual_in_transformer": SeedRef(
        f"{_F}:43",
        "On parity and S3 the Transformer's probe accuracy increases step by step from block 1 to block 3, "
        "unlike the abrupt final-block rise of Mamba and the LSTM.",
        deviation="'step by step' is fixed by the project (gain >= 0.1 over the blocks, no block > 60% of it), read "
                  "over every block; at the cpu preset both Transformer cells are not_run (budget)"),
    "dyck_early_in_transformer_gradual_in_recurrent": SeedRef(
        f"{_F}:44",
        "On Dyck the order flips: Transformers already read the depth almost perfectly in block 0 or 1, whereas "
        "Mamba and the LSTM improve block after block and saturate only deep in the stack.",
        deviation="'early' = best block in the first half of the blocks, 'gradual' = the project's gain / share "
                  "thresholds; GRU shown beside, not counted"),
    "s3_groups_with_parity": SeedRef(
        f"{_F}:35",
        "The non-commutative S3 task clusters with parity (not Dyck) for every architecture, so commutativity "
        "is not what sets the encoding profile; the computation type (prefix update vs stack) is.",
        deviation="the summary says every architecture; the claim needs most architectures that learned all three "
                  "tasks (each judged by the project's early / late / gradual descriptors)"),
    "probe_direction_ablation_drops_accuracy": SeedRef(
        f"{_F}:47",
        "In the small 4-layer models, removing the best probe direction lowers accuracy markedly, and the same "
        "direction stays necessary on sequences longer than those seen in training.",
        deviation="projects out the probe's whole class subspace (not one direction) and requires beating >= 200 "
                  "random subspaces of equal rank by 0.02 at every length read; the summary reports no control "
                  "and no size"),
    "conv1d_matters_for_prefix_not_dyck": SeedRef(
        f"{_F}:51",
        "Taking Mamba's Conv1D out costs 12.64 points on S3 and 6.83 on parity, while on Dyck accuracy moves "
        "by +4.04 points, which is not significant: the component matters per task.",
        study_effect={"s3": 0.1264, "parity": 0.0683, "dyck": -0.0404},
        deviation="drop = mean accuracy over the evaluation lengths with minus without Conv1D (the summary does "
                  "not say which lengths); Dyck's 'no effect' is an equivalence test within +-0.05; at the cpu "
                  "preset parity and S3 are not_run (budget)"),
    "readability_vs_causality_split": SeedRef(
        f"{_F}:49",
        "In Pythia fine-tuned on Dyck a middle-layer bottleneck exists: ablating layers 6-7 removes 81% of the "
        "accuracy at 160M, and the best probe layer (11) is not the most causal one.",
        study_effect={"pythia_160m_dyck_mid_layer_drop": 0.81},
        deviation="small GPT-NeoX and Mamba models pretrained here and fine-tuned on parity stand in for "
                  "Pythia-160M on Dyck; the claim tests only that the readable and causal blocks differ (the 81% is "
                  "shown for reference)"),
}
