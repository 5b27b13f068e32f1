"""Run the PreDiff study end to end: backbone -> adaptations -> held-out bounds -> samples -> claims / report."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from dlmlab.data import TokenStream
from dlmlab.metrics import find_lambada, mean_pooled_features, rep_n, self_bleu
from dlmlab.metrics.likelihood import generative_perplexity
from dlmlab.prediff import METHODS
from dlmlab.progress import bar
from dlmlab.report import StudyResult, write_study
from dlmlab.studies.parallel import default_workers, map_jobs
from dlmlab.studies.prediff.adapt import adapt, held_out_nll, original_weighting_nll, unigram_nll
from dlmlab.studies.prediff.backbone import prepare
from dlmlab.studies.prediff.claims import compute_claims
from dlmlab.studies.prediff.evaluate import generate, lambada, prompts_and_references, sample_metrics, speeds
from dlmlab.studies.prediff.figures import make_figures
from dlmlab.studies.prediff.paired import censored_steps_difference, lower_is_better, seed_mean_t_interval
from dlmlab.studies.prediff.preference import human_preference
from dlmlab.studies.prediff.presets import PRESETS
from dlmlab.studies.prediff.tables import tables
from dlmlab.studies.prediff.threshold import steps_to_reach
from dlmlab.studies.threads import threads_for, torch_threads
from dlmlab.training.distributed import is_main_process

TITLE = "PreDiff-LM: adapting a pretrained causal LM to masked diffusion with hybrid attention"


def _sample_keys(method: str, steps: list[int]) -> list[tuple[str, int | None]]:
    if METHODS[method].is_diffusion:
        return [(f"{method}@{s}", s) for s in steps]
    return [(method, None)]


def _adapt_job(name: str, seed: int, backbone, stream: TokenStream, p, out: Path, progress: bool,
               eval_x: torch.Tensor) -> dict:
    """One job (possibly on a worker process): adapt ``name`` with training seed ``seed`` and evaluate it on the
    held-out windows (the same times and masks for every method) -> per-window NLL, curve, seconds."""
    t1 = time.time()
    model, curve = adapt(name, backbone, stream, p, out, progress, seed=seed)
    nll = held_out_nll(name, model, eval_x, p.prompt_len, p.eval_n_t, seed=1)
    return {"nll": nll.tolist(), "original_weighting_nll": original_weighting_nll(name, model, eval_x, p),
            "curve": curve, "seconds": time.time() - t1}


def _mean_curve(curves: list[list[dict]]) -> list[dict]:
    """Per-step mean PPL over seeds (the seeds share their evaluation steps)."""
    return [{"step": rows[0]["step"], "ppl": sum(r["ppl"] for r in rows) / len(rows)} for rows in zip(*curves)]


def _comparisons(res: dict, p) -> dict:
    """The paired comparisons behind the claims (lower held-out NLL is better; see :mod:`.paired`); each one
    counts in one claim (:data:`~dlmlab.studies.prediff.claims.CLAIM_COMPARISONS`)."""
    nll = {n: np.array(v) for n, v in res["per_window_nll"].items()}  # [S, N]
    pairs = {"hybrid_vs_uniform_bidir": ("prediff", "uniform_bidir"),
             "combined_vs_attention_only": ("attn_obj", "prediff"),
             "combined_vs_objective_only": ("attn_obj", "diffugpt")}
    out = {k: {"a": a, "b": b, **lower_is_better(nll[a], nll[b])} for k, (a, b) in pairs.items() if a in nll and b in nll}
    diff = [n for n, m in res["methods"].items() if m["bound"]]
    if "ar_control" in nll and diff:
        best = min(diff, key=lambda n: res["methods"][n]["val_nll"])
        out["ar_control_vs_best_diffusion"] = {"a": "ar_control", "b": best,
                                               **lower_is_better(nll["ar_control"], nll[best])}
    thr = res.get("threshold")
    if thr and "prediff" in thr["steps"] and "scratch" in thr["steps"]:
        out["ar_init_vs_scratch_steps"] = {"a": "prediff", "b": "scratch", **censored_steps_difference(
            thr["steps"]["prediff"], thr["steps"]["scratch"], thr["budget"])}
    return out


def run(preset: str, out: Path, progress: bool = True) -> StudyResult:
    from dlmlab.studies.prediff.ladder import LADDERS, run_ladder

    if preset in LADDERS:
        return run_ladder(preset, Path(out), progress)
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted([*PRESETS, *LADDERS])}")
    p = PRESETS[preset]
    p.validate()
    p = dataclasses.replace(p, device=p.resolved_device())  # the run records the device it ran on
    with torch_threads(threads_for(p.model.d_model)):  # the same thread count on every machine
        return _run(preset, p, Path(out), progress)


def measure(p, out: Path, progress: bool) -> tuple[dict, object, object, TokenStream, dict]:
    """Backbone, every (method, seed) adaptation, held-out NLLs, the threshold and the paired comparisons ->
    (res, backbone, tokenizer, stream, info); the part of a run the ladder repeats at every size."""
    out.mkdir(parents=True, exist_ok=True)
    backbone, tokenizer, stream, info = prepare(p, out, progress)
    eval_x = TokenStream.chunks(stream.val, p.seq_len, limit=p.eval_windows).to(p.device)
    data = {k: v for k, v in info.items() if k != "backbone"}
    data["unigram_nll"] = unigram_nll(stream.train, eval_x, p.prompt_len, info["tokenizer_vocab"])
    res: dict = {"backbone": info["backbone"], "data": data, "methods": {}, "per_window_nll": {}, "samples": {},
                 "speed": {}, "eval_windows": len(eval_x), "seeds": list(p.seeds), "budget": p.adapt.steps}
    # every (method, seed) adaptation is independent: they run on worker processes; the first seed's models are
    # then reloaded here from their last checkpoints for sampling
    keys = [(name, seed) for name in p.methods for seed in p.seeds]
    jobs = [(name, seed, backbone, stream, p, out, progress, eval_x) for name, seed in keys]
    done = dict(zip(keys, map_jobs(_adapt_job, jobs, default_workers(p.device), desc="adaptations",
                                   progress=progress, threads=threads_for(p.model.d_model))))
    for name in p.methods:
        m = METHODS[name]
        runs = [done[(name, s)] for s in p.seeds]
        per_window = [r["nll"] for r in runs]
        ci = seed_mean_t_interval(per_window)
        orig = [r["original_weighting_nll"] for r in runs]
        res["per_window_nll"][name] = per_window
        res["methods"][name] = {
            "init": m.init, "attention": m.attention, "objective": m.objective, "bound": m.is_diffusion,
            "val_nll": ci["mean"], "val_ppl": math.exp(ci["mean"]),
            "val_ppl_interval": [_exp(ci["lo"]), _exp(ci["hi"])], "val_interval_n": ci["n"],
            "val_interval_unit": ci["unit"], "val_nll_per_seed": ci["per_seed"],
            "original_weighting_ppl": None if orig[0] is None else math.exp(sum(orig) / len(orig)),
            "curve": _mean_curve([r["curve"] for r in runs]), "curves": [r["curve"] for r in runs],
            "seconds": sum(r["seconds"] for r in runs)}
    res["threshold"] = steps_to_reach(res["methods"], p.adapt.steps)
    res["comparisons"] = _comparisons(res, p)
    return res, backbone, tokenizer, stream, info


def _exp(x: float) -> float:
    return math.exp(x) if math.isfinite(x) else float("nan")


def _run(preset: str, p, out: Path, progress: bool) -> StudyResult:
    out = Path(out)
    t0 = time.time()
    res, backbone, tokenizer, stream, info = measure(p, out, progress)
    prompts, refs = prompts_and_references(stream, p)
    models = {name: adapt(name, backbone, stream, p, out, progress=False, seed=p.seeds[0])[0] for name in p.methods}

    # samples of the first seed's models and their metrics: generative PPL under the AR control (the study's judge;
    # the pretrained backbone when the run has no AR control), MAUVE features from the pretrained backbone
    judge = models.get("ar_control", backbone)
    res["gen_ppl_judge"] = "ar_control" if "ar_control" in models else "pretrained backbone"
    full_ref = torch.cat([prompts, refs], 1)
    ref_feats = mean_pooled_features(backbone, refs.tolist())
    res["reference"] = {"gen_ppl": generative_perplexity(judge, full_ref.to(p.device), p.sample_prompt_len),
                        "rep4": rep_n(refs.tolist(), 4), "self_bleu": self_bleu([tokenizer.decode(r.tolist()) for r in refs])}
    texts: dict[str, list[str]] = {"reference": [tokenizer.decode(r.tolist()) for r in refs]}
    jobs = [(name, key, s) for name in p.methods for key, s in _sample_keys(name, p.sample_steps)]
    for name, key, steps in bar(jobs, desc="sampling", disable=not progress, leave=False, log_every_s=0):
        samples = generate(name, models[name], prompts, p, steps)
        res["samples"][key] = sample_metrics(samples, refs, judge, backbone, tokenizer, p, ref_feats)
        texts[key] = [tokenizer.decode(s[p.sample_prompt_len:].tolist()) for s in samples]
    res["speed"] = speeds(jobs, models, prompts, p)
    if is_main_process():
        with open(out / "samples.jsonl", "w") as f:
            for i in range(len(prompts)):
                ptxt = tokenizer.decode(prompts[i].tolist())
                for key, col in texts.items():
                    f.write(json.dumps({"prompt": ptxt, "method": key, "sample": col[i]}) + "\n")

    lam = find_lambada()
    if lam is None:
        res["lambada"] = {"skipped": "no local LAMBADA file (put lambada/lambada_test.jsonl under the data folder)"}
    else:
        res["lambada"] = {n: lambada(n, models[n], tokenizer, lam, p) for n in p.methods if n in ("prediff", "ar_control")}

    res["human_preference"] = human_preference(out)
    claims = compute_claims(res)
    figures = make_figures(res, out)
    result = StudyResult(
        study="prediff", preset=preset, config=dataclasses.asdict(p), results=res, tables=tables(res, p),
        figures=figures, claims=claims, wall_time_s=time.time() - t0, setup=setup_text(p, info))
    write_study(out, result, TITLE)
    return result


LOSS_TEXT = {"masked_ce": "the study's masked-token cross-entropy with cosine mask rates t = cos(pi u / 2) in [0.01, 0.99]",
             "mdlm_bound": "the MDLM 1/t-weighted bound with t ~ U[0.001, 1]"}


def setup_text(p, info: dict) -> str:
    b = info["backbone"]
    src = (f"a GPT-2-architecture AR model ({b.get('params', 0):,} parameters, d_model {p.model.d_model}, "
           f"{p.model.n_layers} layers) pretrained here for {p.pretrain.steps} steps on {p.corpus} with a "
           f"{info['tokenizer_vocab']}-token BPE, exported in Hugging Face GPT-2 format and loaded back"
           if b.get("source") == "pretrained here" else f"the {b['kind']} checkpoint at {b['source']}")
    return (f"Backbone: {src}.  Each method then trains {p.adapt.steps} steps once per seed {list(p.seeds)} (batch "
            f"{p.adapt.batch_size}, windows of {p.seq_len} tokens whose first {p.prompt_len} are a clean prompt; "
            f"lr {p.adapt.lr}, from-scratch lr {p.scratch_lr}); diffusion methods train on {LOSS_TEXT[p.loss]}; the "
            f"mask token starts as a {p.mask_init} embedding.  Held-out PPL: {p.eval_windows} validation windows, "
            f"target = tokens after the first {p.prompt_len}; diffusion numbers are Monte-Carlo ELBO bounds "
            f"({p.eval_n_t} antithetic t draws per window, self-conditioning on, the same draws for every method); "
            f"intervals are Student-t 95% intervals over the {len(p.seeds)} seed means (each seed's mean over the same "
            f"windows), with n beside each.  The study code's "
            f"1/(1-t)-weighted number ({p.original_eval_n_t} midpoint mask rates) is shown beside it for "
            f"comparison with the paper: it is not a bound.  Samples (first seed's models): {p.n_prompts} held-out "
            f"prompts of {p.sample_prompt_len} tokens, {p.gen_len} generated tokens, temperature {p.temperature}, "
            f"top-p {p.top_p}; generative PPL under the AR control, MAUVE features from the pretrained backbone.  "
            f"Tokens/s: batch {p.speed_batch}, median of {p.speed_repeats} interleaved rounds on {p.device}; the speed "
            f"claim's interval is over the per-round ratios.")
