"""The induction scale ladder: the statistics only scale can settle, at 3 DLM sizes with several seeds.

``dlmlab reproduce induction --preset ladder --out DIR`` trains the cpu recipe's two-layer DLM (8 heads, so layer
0 has room for separate previous- and next-token heads) at each ``d_model`` of the ladder and each seed, then
measures per model: the best layer-0 previous- and next-token head scores, the mask-rate probe R^2 after block 0
over the training rates and over the full range [0, 1], both-sides additivity (|ratio - 1| and the smaller
side's share of gain(both)) and forward accuracy.  Per statistic: the per-size Student-t interval over seeds and
the trend from the smallest to the largest size (:mod:`dlmlab.report.ladder`), as a table and a figure.

Resumable: each model trains in ``DIR/runs/d<d_model>_s<seed>/`` (a re-run resumes from its checkpoints or reuses
a finished run; a run trained with another recipe is retrained).  Not part of ``make demo``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dlmlab.analysis import heads, induction, timestep
from dlmlab.config import Config, require
from dlmlab.report import StudyResult, write_study
from dlmlab.report.ladder import LadderStat, ladder_figure, ladder_table, trend
from dlmlab.studies.induction.analyse import FULL_RANGE, lightly_masked
from dlmlab.studies.induction.claims import MIN_SIDE_SHARE, PREV_NEXT_THRESHOLD
from dlmlab.studies.induction.presets import PRESETS, InductionPreset
from dlmlab.studies.induction.train import load_data, train_model
from dlmlab.studies.parallel import default_workers, map_jobs
from dlmlab.studies.threads import torch_threads
from dlmlab.tasks.repeated import mixed_batch, repeated_tokens

TITLE = "Induction in both directions: scale ladder (DLM, depth 2)"
PROBE_LEVEL = 0.8  # mask_rate_probe_r2's level


@dataclass
class InductionLadder(Config):
    """``recipe``: the training and evaluation of every model (depth 2, DLM); ``d_models`` the sizes (``n_heads``
    of the recipe at every size); ``seeds`` the training seeds per size (>= 2 for an interval)."""

    recipe: InductionPreset
    d_models: list[int] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1])

    def validate(self) -> None:
        require(len(self.d_models) >= 2 and len(set(self.d_models)) == len(self.d_models),
                f"a ladder needs >= 2 distinct sizes, got {self.d_models}")
        require(len(self.seeds) >= 2 and len(set(self.seeds)) == len(self.seeds), "a ladder needs >= 2 seeds")
        for d in self.d_models:
            self.preset(d, self.seeds[0]).validate()

    def preset(self, d_model: int, seed: int) -> InductionPreset:
        return dataclasses.replace(self.recipe, d_model=d_model, seed=seed, depths=[2])


LADDERS: dict[str, InductionLadder] = {
    # the cpu recipe at 8 heads, d_model 32 / 64 / 128, 2 seeds, 22000 steps (6000 text-only; checkpoints every
    # 2000): sized to ~35 minutes on 2 idle cores from the per-step cost (docs/induction.md, "Scale ladder").  The
    # cpu preset moved to 16000 steps with no text-only phase later in issue 34; the ladder keeps the recipe it ran.
    "ladder": InductionLadder(recipe=dataclasses.replace(PRESETS["cpu"], n_heads=8, steps=22000, text_steps=6000,
                                                         ckpt_every=2000),
                              d_models=[32, 64, 128], seeds=[0, 1]),
    # the pipeline at smoke sizes (tests)
    "ladder_smoke": InductionLadder(recipe=dataclasses.replace(PRESETS["smoke"], n_heads=4, ckpt_every=0),
                                    d_models=[16, 32], seeds=[0, 1]),
}


def measure(model, p: InductionPreset, mask_id: int, eval_tokens: torch.Tensor, probe_tokens: torch.Tensor) -> dict:
    """The ladder's statistics of one trained DLM -> dict of floats."""
    model.eval()
    x = lightly_masked(eval_tokens, mask_id, seed=p.seed)
    prev = float(heads.previous_token_scores(model, x)[0].max())
    nxt = float(heads.next_token_scores(model, x)[0].max())
    r2 = timestep.mask_rate_probe(model, probe_tokens, mask_id, seed=p.seed, t_range=(p.t_min, p.t_max)).r2[1]
    r2_full = timestep.mask_rate_probe(model, probe_tokens, mask_id, seed=p.seed, t_range=FULL_RANGE).r2[1]
    g = induction.context_gains(model, eval_tokens, mask_id, "forward", p.per_seq, seed=p.seed)
    both = float(g["both"].mean())
    share = min(float(g["left"].mean()), float(g["right"].mean())) / both if both > 0 else float("nan")
    acc = induction.dlm_accuracy(model, eval_tokens, mask_id, "forward", "both", p.per_seq, seed=p.seed)
    return {"prev_layer0": prev, "next_layer0": nxt, "probe_r2_train_range": r2, "probe_r2_full_range": r2_full,
            "additivity_ratio": induction.additivity(g), "min_side_share": share, "forward_accuracy": acc,
            "params": sum(q.numel() for q in model.parameters())}


def _job(p: InductionPreset, run_dir: Path, progress: bool) -> dict:
    from dlmlab.studies.induction import _prepare_run_dir

    data = load_data(p)
    _prepare_run_dir(run_dir, {"preset": dataclasses.asdict(p), "objective": "dlm", "n_layers": 2,
                               "text_vocab": data.vocab.text_vocab})
    t0 = time.time()
    model, _ = train_model(p, data, 2, "dlm", run_dir, progress)
    secs = time.time() - t0
    eval_tokens = repeated_tokens(p.eval_seqs, p.seq_len // 2, data.lo, data.hi,
                                  torch.Generator().manual_seed(1000 + 1), distinct=True)  # the same rows every seed
    probe_tokens = mixed_batch(data.val_ids, p.probe_seqs, p.seq_len, p.p_repeated, data.lo, data.hi,
                               torch.Generator().manual_seed(1000 + 2), p.min_half)
    return {**measure(model, p, data.vocab.mask_id, eval_tokens, probe_tokens), "train_seconds": secs,
            "d_model": p.d_model, "seed": p.seed}


def stats(rows: list[dict]) -> list[LadderStat]:
    """LadderStats over sizes (parameters) from the per-model rows."""
    by: dict[float, list[dict]] = {}
    for r in rows:
        by.setdefault(float(r["params"]), []).append(r)

    def vals(f):
        return {k: [f(r) for r in v] for k, v in by.items()}

    return [LadderStat("layer-0 previous-token head (best score)", vals(lambda r: r["prev_layer0"]), 1,
                       PREV_NEXT_THRESHOLD),
            LadderStat("layer-0 next-token head (best score)", vals(lambda r: r["next_layer0"]), 1,
                       PREV_NEXT_THRESHOLD),
            LadderStat("mask-rate probe R^2 after block 0 (training rates)",
                       vals(lambda r: r["probe_r2_train_range"]), 1, PROBE_LEVEL),
            LadderStat("mask-rate probe R^2 after block 0 (full range [0, 1])",
                       vals(lambda r: r["probe_r2_full_range"]), 1, PROBE_LEVEL),
            LadderStat("|additivity ratio - 1| (forward)", vals(lambda r: abs(r["additivity_ratio"] - 1)), -1, 0.0),
            LadderStat("smaller side's share of gain(both) (forward)", vals(lambda r: r["min_side_share"]), 1,
                       MIN_SIDE_SHARE),
            LadderStat("forward accuracy (both sides)", vals(lambda r: r["forward_accuracy"]), 1, 0.0)]


def run(name: str, out: Path, progress: bool = True) -> StudyResult:
    if name not in LADDERS:
        raise ValueError(f"unknown ladder {name!r}; choose from {sorted(LADDERS)}")
    lad = LADDERS[name]
    lad.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    jobs = [(lad.preset(d, s), out / "runs" / f"d{d}_s{s}", progress) for d in lad.d_models for s in lad.seeds]
    with torch_threads(lad.recipe.threads):
        rows = map_jobs(_job, jobs, default_workers(lad.recipe.device), desc="induction ladder", progress=progress,
                        threads=lad.recipe.threads)
    st = stats(rows)
    table = ladder_table(st, "Induction scale ladder (DLM, depth 2, 8 heads at the full ladder)")
    fig = ladder_figure(st, out, "ladder", "Induction statistics over DLM size (parameters): mean and 95% t-interval "
                                               "over seeds; dashed: the claim's level")
    results = {"ladder": {"models": rows, "trends": {s.name: trend(s).as_dict() for s in st},
                          "per_size": {s.name: {str(k): iv.as_dict() for k, iv in s.per_size.items()} for s in st}}}
    res = StudyResult(study="induction", preset=name, config=dataclasses.asdict(lad), results=results,
                      tables=[table], figures=[fig], claims=[], wall_time_s=time.time() - t0,
                      setup=f"DLM depth 2 at d_model {lad.d_models}, {lad.recipe.n_heads} heads, seeds {lad.seeds}; "
                            f"recipe: {lad.recipe.steps} steps ({lad.recipe.text_steps} text-only), batch "
                            f"{lad.recipe.batch_size}, mask rates [{lad.recipe.t_min}, {lad.recipe.t_max}]")
    write_study(out, res, TITLE)
    return res
