"""The PreDiff scale ladder: the study's comparisons at 3 backbone sizes, one recipe for all.

``dlmlab reproduce prediff --preset ladder --out DIR`` pretrains a backbone of each size and adapts it with
every method over the seeds (the cpu preset's recipe unchanged: data, budget, batch, learning rates and
evaluation), then reports per comparison the per-size Student-t interval over seeds and the trend from the
smallest to the largest size (:mod:`dlmlab.report.ladder`): a table and a figure, plus each size's claim
verdicts.

A ladder never trains less than the preset it extends (``extends``): :meth:`PreDiffLadder.validate` refuses a
recipe with fewer pretraining or adaptation steps, a smaller batch or fewer seeds (issue 34: a ladder that
cut adaptation to 300 steps, below the 500 at which the cpu models learn, read its own precondition failures
as a finding about scale).  Where the study reports a value for a comparison, the trend is measured toward
that value (:func:`toward_study_side`), not toward the claim's level.  No sampling, speed or
MAUVE (they do not bear on the comparisons).  Each size lives in ``DIR/size-d<d_model>-l<n_layers>/``; a
re-run reuses finished sizes (their ``measured.json``) and resumes unfinished adaptations from checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlmlab.config import Config, require
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.models import TransformerConfig
from dlmlab.progress import bar
from dlmlab.report import StudyResult, Table, write_study
from dlmlab.report.ladder import LadderStat, ladder_figure, ladder_table, trend
from dlmlab.studies.prediff.claims import compute_claims
from dlmlab.studies.prediff.presets import PRESETS, PreDiffPreset
from dlmlab.studies.prediff.seeds import STUDY_EFFECTS
from dlmlab.studies.threads import threads_for, torch_threads

#: (comparison key, label) of the ladder's statistics: A - B, lower is better for A (side -1, level 0)
STATS = [("hybrid_vs_uniform_bidir", "hybrid - uniform NLL (prediff - uniform_bidir)"),
         ("combined_vs_attention_only", "combined - attention only NLL (attn_obj - prediff)"),
         ("combined_vs_objective_only", "combined - objective only NLL (attn_obj - diffugpt)"),
         ("ar_control_vs_best_diffusion", "AR control - best diffusion NLL"),
         ("ar_init_vs_scratch_steps", "AR init - scratch steps to threshold (censored)")]


def _model(d: int, layers: int, heads: int) -> TransformerConfig:
    return TransformerConfig(d_model=d, n_layers=layers, n_heads=heads, d_mlp=4 * d, mlp="gelu_new", max_seq_len=128)


@dataclass
class PreDiffLadder(Config):
    """``recipe``: every size's data, training and evaluation (its ``model`` replaced by each of ``sizes``);
    ``extends``: the preset whose recipe it scales, which it may not train less than."""

    recipe: PreDiffPreset
    sizes: list[TransformerConfig] = field(default_factory=list)
    extends: str = "cpu"

    def validate(self) -> None:
        require(self.extends in PRESETS, f"extends must name a preset ({sorted(PRESETS)}), got {self.extends!r}")
        base, r = PRESETS[self.extends], self.recipe
        for what, mine, theirs in (("pretrain.steps", r.pretrain.steps, base.pretrain.steps),
                                   ("pretrain.batch_size", r.pretrain.batch_size, base.pretrain.batch_size),
                                   ("adapt.steps", r.adapt.steps, base.adapt.steps),
                                   ("adapt.batch_size", r.adapt.batch_size, base.adapt.batch_size),
                                   ("number of seeds", len(r.seeds), len(base.seeds))):
            require(mine >= theirs, f"a ladder never trains less than the preset it extends: {what} {mine} < "
                                    f"{self.extends}'s {theirs}")
        require(len(self.sizes) >= 2, f"a ladder needs >= 2 sizes, got {len(self.sizes)}")
        require(len({(s.d_model, s.n_layers) for s in self.sizes}) == len(self.sizes), "ladder sizes must differ")
        require(len(self.recipe.seeds) >= 2, "a ladder needs >= 2 seeds per size for its intervals")
        for s in self.sizes:
            self.size_preset(s).validate()

    def size_preset(self, size: TransformerConfig) -> PreDiffPreset:
        return dataclasses.replace(self.recipe, model=size)


def _ladder() -> PreDiffLadder:
    """The cpu recipe unchanged (500 adaptation steps, 3 seeds) at d_model 32 / 64 / 96 (62k / 274k / 558k
    parameters; d 128 would cost ~2.3x the cpu size per step)."""
    return PreDiffLadder(PRESETS["cpu"], [_model(32, 2, 2), _model(64, 4, 4), _model(96, 4, 4)], extends="cpu")


def _ladder_smoke() -> PreDiffLadder:
    """Two tiny sizes of the smoke recipe (seconds per size; for tests and a quick look)."""
    smoke = PRESETS["smoke"]
    recipe = dataclasses.replace(smoke, eval_windows=8, curve_windows=4)
    small = dict(mlp="gelu_new", max_seq_len=48)
    return PreDiffLadder(recipe, [TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_mlp=64, **small),
                                  TransformerConfig(d_model=32, n_layers=2, n_heads=2, d_mlp=128, **small)],
                         extends="smoke")


LADDERS: dict[str, PreDiffLadder] = {"ladder": _ladder(), "ladder_smoke": _ladder_smoke()}


def _size_dir(out: Path, s: TransformerConfig) -> Path:
    return out / f"size-d{s.d_model}-l{s.n_layers}"


def measure_size(p: PreDiffPreset, out: Path, progress: bool) -> dict:
    """One size's measurements (:func:`dlmlab.studies.prediff.run.measure`), kept in ``out/measured.json`` and
    reused when its preset is unchanged: {params, seconds, methods {val_nll, per seed, curves}, threshold,
    comparisons, data, budget}."""
    from dlmlab.studies.prediff.run import measure

    cache = out / "measured.json"
    config = json.loads(strict_json(dataclasses.asdict(p)))
    if cache.exists():
        kept = json.loads(cache.read_text())
        if kept.get("config") == config:
            return kept["measured"]
    t0 = time.time()
    with torch_threads(threads_for(p.model.d_model)):
        res, backbone, *_ = measure(p, out, progress)
    keep = ("init", "attention", "objective", "bound", "val_nll", "val_nll_per_seed", "curves", "seconds")
    measured = {"params": backbone.num_params(), "seconds": time.time() - t0, "data": res["data"],
                "budget": res["budget"], "threshold": res["threshold"], "comparisons": res["comparisons"],
                "methods": {n: {k: m[k] for k in keep} for n, m in res["methods"].items()}}
    atomic_write_text(cache, strict_json({"config": config, "measured": measured}, indent=1))
    return json.loads(strict_json(measured))  # the same (JSON) form a re-run reads back


def toward_study_side(values: dict[int, list[float]], study: float | None, claim_side: int = -1) -> int:
    """The side a trend must move to approach the study's value: the direction from the smallest size's mean
    to ``study`` (+1 up, -1 down), fixed by the smallest size alone before the others are read; the claim's
    side when the study reports no value (or the smallest size sits on it)."""
    if study is None:
        return claim_side
    small = values[min(values)]
    mean = sum(small) / len(small)
    return claim_side if mean == study else (1 if study > mean else -1)


def ladder_stats(by_size: dict[int, dict]) -> list[LadderStat]:
    """{params: measured} -> one :class:`LadderStat` per comparison present at every size (per-seed A - B), its
    trend measured toward the study's value where it reports one (:func:`toward_study_side`)."""
    out = []
    for key, label in STATS:
        if not all(key in m["comparisons"] for m in by_size.values()):
            continue
        values = {n: m["comparisons"][key]["per_seed"] for n, m in by_size.items()}
        study = STUDY_EFFECTS.get(key)
        out.append(LadderStat(label, values, side=toward_study_side(values, study), level=0.0, study_value=study))
    return out


def verdict_table(by_size: dict[int, dict]) -> Table:
    """Each claim's verdict at each size (no speed: the ladder does not time samplers)."""
    sizes = sorted(by_size)
    verdicts = {n: {c.id: c.judgement.label() for c in compute_claims(m)} for n, m in by_size.items()}
    ids = [i for i in verdicts[sizes[0]] if i != "few_step_sampling_faster_than_ar"]
    return Table("Claim verdicts per size", ["claim", *[f"{n:,} params" for n in sizes]],
                 [[i, *[verdicts[n][i] for n in sizes]] for i in ids],
                 note="Each size's claims judged as in the cpu preset (t-intervals over its seeds, the learned "
                      "preconditions); the speed claim is not part of the ladder.")


def run_ladder(name: str, out: Path, progress: bool = True) -> StudyResult:
    from dlmlab.studies.prediff.run import TITLE

    lad = LADDERS[name]
    lad.validate()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    by_size = {}
    for s in bar(lad.sizes, desc="ladder sizes", disable=not progress, log_every_s=0):
        m = measure_size(lad.size_preset(s), _size_dir(out, s), progress)
        by_size[m["params"]] = m
    stats = ladder_stats(by_size)
    table = ladder_table(stats, "PreDiff comparisons over backbone size (A - B; below 0 favours A)")
    table.note += ("  Per seed: the mean over held-out windows of A - B (nats / target token; steps for the "
                   "threshold, censored runs at the budget).  Study: its reported difference, from its perplexities, where it "
                   "reports one; there the trend is measured toward it (the side from the smallest size's mean to "
                   "the study's value), elsewhere on the claim's side (below 0).")
    figure = ladder_figure(stats, out, "ladder", "PreDiff comparisons (A - B) over backbone parameters: mean and "
                                                 "95% t-interval over seeds; below 0 favours A")
    sizes_table = Table("Ladder sizes", ["d_model", "layers", "heads", "parameters", "seconds"],
                        [[s.d_model, s.n_layers, s.n_heads, m["params"], round(m["seconds"], 1)]
                         for s, m in zip(lad.sizes, by_size.values())])
    results = {"sizes": {str(n): m for n, m in by_size.items()},
               "trends": {st.name: trend(st).as_dict() for st in stats}}
    r = lad.recipe
    setup = (f"The cpu recipe at {len(lad.sizes)} backbone sizes ({', '.join(f'{n:,}' for n in by_size)} parameters): "
             f"each pretrained {r.pretrain.steps} steps on {r.corpus}, then every method ({', '.join(r.methods)}) "
             f"adapts {r.adapt.steps} steps per seed {list(r.seeds)}; held-out NLL on {r.eval_windows} windows.")
    result = StudyResult(study="prediff", preset=name, config=dataclasses.asdict(lad), results=results,
                         tables=[table, verdict_table(by_size), sizes_table], figures=[figure], claims=[],
                         wall_time_s=time.time() - t0, setup=setup)
    write_study(out, result, f"{TITLE}: scale ladder")
    return result
