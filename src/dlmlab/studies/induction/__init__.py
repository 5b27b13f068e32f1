"""Study: induction in both directions, attention-only AR vs masked-diffusion (MDLM) transformers.

``run(preset, out)`` trains the matched pairs (depths ``preset.depths``; causal + next-token
loss vs bidirectional + MDLM loss, everything else equal) with the toolkit training loop
(checkpoints of every run kept under ``out/runs/<obj>_L<depth>`` for the emergence curve; a
re-run with the same preset resumes / reuses them), measures each model with the reusable
``dlmlab.analysis`` modules and writes results.json, report.md and figures/*.png.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import torch

from dlmlab.report import StudyResult, Table, claim, write_study
from dlmlab.report.claims import learned_level, not_run
from dlmlab.report.results import _clean
from dlmlab.report.seeds import with_seeds
from dlmlab.studies.induction import figures as figs
from dlmlab.studies.induction import steering
from dlmlab.studies.induction.analyse import analyse_model, lightly_masked
from dlmlab.studies.induction.claims import CLAIM_IDS, INDUCTION_THRESHOLD, PREV_NEXT_THRESHOLD, all_claims
from dlmlab.studies.induction.presets import PRESETS, InductionPreset
from dlmlab.studies.induction.seeds import SEED_REFS
from dlmlab.studies.parallel import default_workers, map_jobs
from dlmlab.studies.threads import torch_threads
from dlmlab.training.distributed import is_main_process, sync
from dlmlab.studies.induction.train import (OBJECTIVES, StudyObjective, load_data, study_objective, text_epochs,
                                            train_model)
from dlmlab.tasks.repeated import mixed_batch, repeated_tokens

TITLE = "Induction in both directions: attention-only AR vs masked-diffusion transformers"

__all__ = ["TITLE", "PRESETS", "InductionPreset", "run", "CLAIM_IDS"]


def _prepare_run_dir(run_dir: Path, config: dict) -> None:
    """Reuse ``run_dir`` only if it was trained with the same config; otherwise start it afresh.

    Under ``torchrun`` rank 0 decides and the others wait for it.
    """
    if is_main_process():
        cfg_path = run_dir / "run_config.json"
        if run_dir.exists() and (not cfg_path.exists() or json.loads(cfg_path.read_text()) != config):
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg_path.write_text(json.dumps(config, indent=1))
    sync()


def group_seeds(keys: list[tuple[str, int]], measured: list[dict]) -> dict:
    """``{"dlm_L2": seed 0's measurements, with ``seed_runs``: [seed 1's, ...]}`` from the jobs' (key, seed)
    and their measurements (in job order)."""
    models: dict = {}
    for (key, s), meas in zip(keys, measured):
        if s == 0:
            models[key] = {**meas, "seed_runs": []}
    for (key, s), meas in zip(keys, measured):
        if s:
            models[key]["seed_runs"].append(meas)
    return models


def _head(scores, layer: int) -> tuple[int, float]:
    row = scores[layer]
    h = max(range(len(row)), key=lambda i: row[i])
    return h, row[h]


def _tables(models: dict) -> list[Table]:
    keys = sorted(models, key=lambda k: (models[k]["n_layers"], models[k]["objective"]))
    acc = Table("Induction accuracy (repeated random tokens; AR: left context only)",
                ["model", "fwd left", "fwd right", "fwd both", "rev left", "rev right", "rev both"],
                [[k] + [models[k]["accuracy"][d][c] for d in ("forward", "reverse") for c in ("left", "right", "both")]
                 for k in keys])
    rows = []
    for k in keys:
        m = models[k]
        hp, sp = _head(m["prev_token_scores"], 0)
        hn, sn = _head(m["next_token_scores"], 0)
        top = m.get("top_induction_head")
        ind = m["induction_scores"][top[0]][top[1]] if top else None
        rows.append([k, f"H{hp}", sp, f"H{hn}", sn, "L{}H{}".format(*top) if top else None, ind,
                     m.get("top_induction_head_mean_drop"), m.get("top_induction_head_zero_drop")])
    heads = Table("Heads: layer-0 previous/next-token heads, top induction head and its ablation",
                  ["model", "prev head", "prev score", "next head", "next score", "induction head", "induction score",
                   "mean-abl drop", "zero-abl drop"], rows)
    probe_rows = []
    for k in [k for k in keys if "probe" in models[k]]:
        pr, full, pt = models[k]["probe"], models[k].get("probe_full_range"), models[k]["patch"]
        ctl = pt.get("control") or {}
        probe_rows.append([k, f"[{pr['t_range'][0]}, {pr['t_range'][1]}]", " / ".join(f"{x:.2f}" for x in pr["r2"]),
                           pr["r2_control"][1], pr["r2_pooled"][1],
                           " / ".join(f"{x:.2f}" for x in full["r2"]) if full else None,
                           full["r2_control"][1] if full else None, pt["entropy_clean"], pt["delta"],
                           pt["random_p95"], len(pt["random_deltas"]), ctl.get("p")])
    probe = Table("Implicit timestep: mask-rate probe R^2 (embedding, after each block) over the training mask rates "
                  "and over the full range [0, 1] (the same checkpoint), its controls, and the difference-of-means "
                  "shift after block 0 against equal-norm random shifts (permutation p)",
                  ["model", "training rates", "held-out R^2 per point", "shuffled-label R^2 (block 0)",
                   "pooled R^2 (block 0)", "full range [0, 1]: R^2 per point", "full range: shuffled-label R^2",
                   "entropy (nats)", "delta entropy", "random shifts p95", "random shifts", "p"], probe_rows)
    set_rows = []
    for k in [k for k in keys if "induction_set_ablation" in models[k]]:
        t = models[k]["induction_set_ablation"]
        set_rows.append([k, ", ".join("L{}H{}".format(*h) for h in t["heads"]) or "none", t["base"], t["drop"],
                         t["random_p95"], len(t["random_drops"]), "every other set" if t.get("exhaustive") else
                         "random", (t.get("control") or {}).get("p"), t.get("min_p")])
    sets = Table("Induction-head set ablation (mean) vs same-size sets from layers >= 1 (permutation p; with few "
                 "heads in the pool every other set is used once, and p cannot go below min p)",
                 ["model", "induction heads", "base accuracy", "set drop", "control p95", "control sets", "control",
                  "p", "min p"], set_rows)
    per_head = Table("Per head: induction score (target -> source attention) and single-head mean-ablation drop",
                     ["model", "head", "induction score", "mean-abl drop", "zero-abl drop"],
                     [[k, f"L{li}H{h}", models[k]["induction_scores"][li][h], models[k]["ablation"]["mean_drop"][li][h],
                       models[k]["ablation"]["zero_drop"][li][h]]
                      for k in keys for li in range(models[k]["n_layers"])
                      for h in range(len(models[k]["induction_scores"][0]))])
    gains = Table("Log-probability gain of the correct token over the no-source baseline (DLMs)",
                  ["model", "direction", "gain left", "gain right", "gain both", "both / (left + right)"],
                  [[k, d, models[k]["gains"][d]["left"], models[k]["gains"][d]["right"], models[k]["gains"][d]["both"],
                    models[k]["gains"][d]["ratio"]] for k in keys if "gains" in models[k] for d in ("forward", "reverse")])
    window = Table("Local window (background mask rate): forward accuracy with neighbours masked",
                   ["model", "target only", "+-1", "+-2 only", "+-1 and +-2", "two far positions"],
                   [[k] + [models[k]["local_window"][c] for c in ("none", "pm1", "pm2_only", "pm1_pm2", "far2")]
                    for k in keys if "local_window" in models[k]])
    fold = Table("LayerNorm folding (scales frozen per position): the folded, LayerNorm-free model's accuracy beside "
                 "the model's (a precondition of the weight-based claims: the folded model must still have learned "
                 "the task); one frozen scale per norm (the old fold) for comparison",
                 ["model", "accuracy", "folded accuracy", "accuracy gap", "learned level", "mean KL",
                  "argmax agreement", "one-scale folded accuracy (old fold)"],
                 [[k, models[k]["fold"]["accuracy"], models[k]["fold"]["folded_accuracy"],
                   models[k]["fold"]["accuracy_gap"], learned_level(models[k].get("chance", 0.0)),
                   models[k]["fold"]["mean_kl"], models[k]["fold"]["argmax_agreement"],
                   models[k]["fold"].get("single_scale_folded_accuracy")] for k in keys])
    comp_rows = []
    for k in keys:
        c = models[k].get("composition_into_top_head")
        if c is None:
            continue
        row = [k, "L{}H{}".format(*models[k]["top_induction_head"])]
        for kind in ("Q", "K", "V"):
            flat = [(v, li, h) for li, r in enumerate(c[kind]) for h, v in enumerate(r)]
            v, li, h = max(flat)
            row.append(f"L{li}H{h}: {v:.2f}")
        comp_rows.append(row)
    comp = Table("Strongest Q-/K-/V-composition into the top induction head (folded model)",
                 ["model", "induction head", "Q-comp", "K-comp", "V-comp"], comp_rows)
    em = Table("Emergence over checkpoints (forward accuracy): midpoint, largest rise and the 10%-90% rise width "
               "against the run length",
               ["model", "midpoint step", "largest rise at step", "largest rise", "final", "10% step", "90% step",
                "width / run steps"],
               [[k, e["midpoint_step"], e["largest_increase_step"], e["largest_increase"], e["final"],
                 e.get("rise", {}).get("step_lo"), e.get("rise", {}).get("step_hi"),
                 (e["rise"]["width"] / e["run_steps"]) if e.get("rise", {}).get("width") is not None else None]
                for k in keys if "emergence" in models[k] for e in [models[k]["emergence"]]])
    tr = Table("Training", ["model", "final loss", "train seconds (this invocation; ~0 when a finished run is reused)"],
               [[k, models[k]["train"]["final_loss"], models[k]["train"]["seconds"]] for k in keys])
    return [acc, _seeds_table(models, keys), heads, sets, per_head, comp, gains, window, probe, fold, em, tr,
            *_twoways_tables(models, keys)]


def _seeds_table(models: dict, keys: list[str]) -> Table:
    """Per model and training seed: the headline forward accuracy (distinct ids) and on few distinct ids."""
    counts = sorted({k for m in models.values() for k in (m.get("few_ids") or {})}, key=int)
    rows = []
    for k in keys:
        for s, r in enumerate([models[k], *models[k].get("seed_runs", [])]):
            rows.append([k, s, r["accuracy"]["forward"][r["context"]],
                         *[(r.get("few_ids") or {}).get(c, {}).get("accuracy") for c in counts]])
    return Table("Forward accuracy per training seed (AR: left context, DLM: both sides): distinct ids, and repeats "
                 "drawn from few distinct ids (the both-sides comparison's id count is chosen on the AR alone)",
                 ["model", "seed", "distinct ids", *[f"{c} ids" for c in counts]], rows)


def _twoways_tables(models: dict, keys: list[str]) -> list[Table]:
    """The heads measured two ways (15%-masked vs unmasked random / text rows), final and over training."""
    rows = []
    for k in keys:
        tw = models[k].get("heads_twoways")
        if not tw:
            continue
        jump = models[k].get("emergence", {}).get("midpoint_step")
        for cond, sc in tw["summary"].items():
            row = [k, cond, tw["n_seqs"][cond], jump]
            for name in ("prev", "next", "induction", "induction_masked_queries"):
                s = sc.get(name)
                row += ["L{}H{}".format(*s["head"]), s["final"], s["first_step_at_threshold"]] if s else [None] * 3
            rows.append(row)
    cols = ["model", "input", "rows", "accuracy jump step"]
    for name in ("prev L0", "next L0", "induction", "induction (masked queries)"):
        cols += [f"{name} head", f"{name} score", f"{name} first step >= thr"]
    return [Table("Heads measured two ways: best head per score on the 15%-masked evaluation rows (DLM), unmasked "
                  "random rows and unmasked repeated text; final score and the first checkpoint step at which the best "
                  f"score reaches {PREV_NEXT_THRESHOLD} (previous/next-token, layer 0) or "
                  f"{INDUCTION_THRESHOLD} (induction, layers >= 1); accuracy jump = midpoint step of the accuracy "
                  "curve", cols, rows), _cost_table(models, keys)]


def _cost_table(models: dict, keys: list[str]) -> Table:
    """One row per model with head scores, then "all"; the fractions are of wall time (columns named "time")."""
    rows = []
    for k in [k for k in keys if "heads_twoways" in models[k]] + ["all"]:
        c = twoways_cost(models if k == "all" else {k: models[k]})
        rows.append([k, c["seconds"], c["train_seconds"], c["analyse_seconds"], c["fraction_of_jobs"],
                     c["fraction_of_analysis"]])
    return Table("Cost of the two-ways head scores (final model + every checkpoint) vs the job's training and "
                 "analysis, seconds in this invocation", ["model", "two-ways seconds", "train seconds",
                                                         "analysis seconds", "time fraction of training + analysis",
                                                         "time fraction of analysis"], rows)


def twoways_cost(models: dict) -> dict:
    """Seconds the two-ways head scores took vs the jobs' training + analysis seconds (summed over models)."""
    tw = sum(m.get("heads_twoways", {}).get("seconds", 0.0) for m in models.values())
    train = sum(m["train"]["seconds"] for m in models.values())
    analyse = sum(m["train"].get("analyse_seconds", 0.0) for m in models.values())
    return {"seconds": tw, "train_seconds": train, "analyse_seconds": analyse,
            "fraction_of_jobs": tw / (train + analyse) if train + analyse > 0 else None,
            "fraction_of_analysis": tw / analyse if analyse > 0 else None}


def _attention_examples(models: dict, trained: dict, eval_tokens: torch.Tensor, objectives: list[StudyObjective],
                        seed: int) -> list:
    deep = sorted({m["n_layers"] for m in models.values() if m["n_layers"] >= 2})
    L = deep[0] if deep else min(m["n_layers"] for m in models.values())
    x = eval_tokens[:1]
    ex = []
    for obj in objectives:
        key = f"{obj.label}_L{L}"
        if key not in models:
            continue
        m = models[key]
        hs = [(0, _head(m["prev_token_scores"], 0)[0], "previous-token")]
        if obj.masked:
            hs.append((0, _head(m["next_token_scores"], 0)[0], "next-token"))
        if m.get("top_induction_head"):
            hs.append((*m["top_induction_head"], "induction"))
        inp = lightly_masked(x, obj.mask_id, seed=seed) if obj.masked else x
        ex.append((key, trained[key], inp, hs))
    return ex


def _train_and_analyse(p: InductionPreset, data, n_layers: int, objective: StudyObjective, run_dir: Path,
                       eval_tokens: torch.Tensor, probe_tokens: torch.Tensor, progress: bool,
                       text_tokens: torch.Tensor | None = None) -> dict:
    """One job (possibly on a worker process): train (or resume) one model, then measure it."""
    ts = time.time()
    model, hist = train_model(p, data, n_layers, objective, run_dir, progress)
    secs = time.time() - ts
    ta = time.time()
    meas = analyse_model(model, objective, p, data.vocab, eval_tokens, probe_tokens, run_dir, progress, text_tokens)
    meas["train"] = {"final_loss": hist[-1]["loss"] if hist else None, "seconds": secs,
                     "analyse_seconds": time.time() - ta}
    return _clean(meas)


class _LazyModels:
    """``trained[key]`` -> the finished model ``key`` (e.g. ``dlm_L2``), reloaded from its last checkpoint."""

    def __init__(self, p: InductionPreset, data, out: Path):
        self.p, self.data, self.out = p, data, out

    def __getitem__(self, key: str):
        obj, L = key.split("_L")
        return train_model(self.p, self.data, int(L), obj, self.out / "runs" / key, progress=False)[0]


def _steering(p: InductionPreset, models: dict, trained, probe_tokens: torch.Tensor,
              objectives: list[StudyObjective], progress: bool):
    """The implicit timestep during real decoding (issue 29): read and steer the mask-rate direction of the
    deepest DLM (the masked objective's) while it threshold-decodes held-out rows, against random directions of
    the same norm (:mod:`dlmlab.studies.induction.steering`); None when the preset runs no steering or trained
    no DLM."""
    dlm = next((o for o in objectives if o.masked), None)
    dlms = sorted((m["n_layers"], k) for k, m in models.items() if dlm is not None and m["objective"] == dlm.label)
    if not p.steer_prompts or not dlms:
        return None
    model = trained[dlms[-1][1]]
    model.eval()
    return steering.run_steering(model, dlm.mask_id, probe_tokens, t_range=(p.t_min, p.t_max),
                                 n_prompts=p.steer_prompts, threshold=p.steer_threshold, seed=p.seed,
                                 progress=progress)


def _setup(p: InductionPreset, data) -> str:
    v = data.vocab
    ids = f"ids from {p.n_random} reserved ones" if p.random_ids == "reserved" else "ids of the text vocabulary"
    n_text = len(data.text_ids)
    files = ", ".join(Path(f).name for f in data.files)
    return (f"Matched attention-only transformers (d_model {p.d_model}, {p.n_heads} heads, {p.positions} positions, "
            f"LayerNorm, depths {p.depths}); AR = causal mask + next-token loss, DLM = bidirectional mask + MDLM loss "
            f"(linear schedule, 1/t weight, mask rates t ~ U[{p.t_min}, {p.t_max}]), identical recipe: {p.steps} AdamW "
            f"steps, batch {p.batch_size}, rows of {p.seq_len} tokens, lr {p.lr} (warmup {p.warmup_steps}, "
            f"{p.schedule} schedule), {p.seeds} training seed(s) per model ({p.seed}..{p.seed + p.seeds - 1}; "
            f"AR at depths >= {p.ar_min_depth}). Corpus: {p.text_source} ({files}; {p.tokenizer} tokens, vocab "
            f"{v.text_vocab}): {n_text} training tokens, {len(data.val_ids)} held out. Curriculum: "
            f"{f'steps 1..{p.text_steps} text windows only; afterwards ' if p.text_steps else 'from the first step '}"
            f"each row is with probability {p.p_repeated} random tokens ({ids}) in which "
            f"a segment of random length {p.min_half}..{p.seq_len // 2} at a random start repeats right after itself, "
            f"else a text window: {text_epochs(p, n_text):.2f} epochs of the training text seen in expectation. "
            f"Evaluation: {p.eval_seqs} fresh repeated sequences with distinct tokens per half, {p.per_seq} masked "
            f"targets per sequence for the DLM; the both-sides comparison also on {p.eval_seqs} repeats drawn from "
            f"each of {p.few_ids} distinct ids (the count picked on the AR alone); mask-rate probe on held-out "
            f"text/repeat rows at rates in [{p.t_min}, {p.t_max}]; difference-of-means shift from rate {p.patch_high} into rate {p.patch_low}.")


def run(preset: str, out: Path, progress: bool = True) -> StudyResult:
    from dlmlab.studies.induction import ladder

    if preset in ladder.LADDERS:  # the scale ladder (its own command: --preset ladder)
        return ladder.run(preset, Path(out), progress)
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS) + sorted(ladder.LADDERS)}")
    p = PRESETS[preset]
    p.validate()
    with torch_threads(p.threads):
        return _run(p, preset, Path(out), progress)


def _run(p: InductionPreset, preset: str, out: Path, progress: bool) -> StudyResult:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    data = load_data(p)
    v = data.vocab
    half = p.seq_len // 2
    eval_tokens = repeated_tokens(p.eval_seqs, half, data.lo, data.hi, torch.Generator().manual_seed(p.seed + 1),
                                  distinct=True)
    probe_tokens = mixed_batch(data.val_ids, p.probe_seqs, p.seq_len, p.p_repeated, data.lo, data.hi,
                               torch.Generator().manual_seed(p.seed + 2), p.min_half)
    text_tokens = mixed_batch(data.val_ids, p.probe_seqs // 2, p.seq_len, 0.0, data.lo, data.hi,
                              torch.Generator().manual_seed(p.seed + 3))
    objectives = [study_objective(p, v, label) for label in OBJECTIVES]
    jobs, keys = [], []
    for L in p.depths:
        for obj in objectives:
            if not obj.masked and L < p.ar_min_depth:  # the next-token (AR) models start at ar_min_depth
                continue
            for s in range(p.seeds):  # seed p.seed + s; seed 0's run folder keeps its old name
                ps = dataclasses.replace(p, seed=p.seed + s)
                run_dir = out / "runs" / (f"{obj.label}_L{L}" + (f"_s{s}" if s else ""))
                _prepare_run_dir(run_dir, {"preset": dataclasses.asdict(ps), "objective": obj.label, "n_layers": L,
                                           "text_vocab": v.text_vocab})
                jobs.append((ps, data, L, obj, run_dir, eval_tokens, probe_tokens, progress, text_tokens))
                keys.append((f"{obj.label}_L{L}", s))
    measured = map_jobs(_train_and_analyse, jobs, default_workers(p.device), desc="induction models", progress=progress,
                        threads=p.threads)
    models = group_seeds(keys, measured)
    trained = _LazyModels(p, data, out)
    claims = all_claims(models)
    steer = _steering(p, models, trained, probe_tokens, objectives, progress)
    if steer is not None:
        claims.append(steering.steering_claim(steer))
    else:  # every claim is written; this one was not run
        claims.append(claim("mask_rate_steering", "Steering the mask-rate direction during threshold decoding",
                            None, judgement=not_run("the preset runs no steering (steer_prompts 0) or trained no DLM")))
    claims = with_seeds(claims, SEED_REFS)
    figures = [
        figs.context_bars(out, models),
        figs.attention_figure(out, _attention_examples(models, trained, eval_tokens, objectives, p.seed)),
        figs.ablation_figure(out, models),
        figs.local_window_figure(out, models),
        figs.probe_figure(out, models),
        figs.emergence_figure(out, models),
        figs.heads_twoways_figure(out, models),
    ]
    setup = _setup(p, data)
    results = {"models": models, "heads_twoways_cost": twoways_cost(models)}
    tables = _tables(models)
    if steer is not None:
        figures.append(steering.steering_figure(steer, out))
        tables += steering.steering_tables(steer)
        results["steering"] = steer.to_dict()
    res = StudyResult(study="induction", preset=preset, config=dataclasses.asdict(p), results=results,
                      tables=tables, figures=figures, claims=claims, wall_time_s=time.time() - t0,
                      setup=setup)
    write_study(out, res, TITLE)
    return res
