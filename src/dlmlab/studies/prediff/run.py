"""Run the PreDiff study end to end: backbone -> adaptations -> held-out bounds -> samples -> claims / report."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from dlmlab.data import TokenStream
from dlmlab.metrics import find_lambada, mean_pooled_features, rep_n, self_bleu, steps_to_threshold
from dlmlab.metrics.likelihood import generative_perplexity
from dlmlab.prediff import METHODS
from dlmlab.report import StudyResult, Table, write_study
from dlmlab.studies.parallel import default_workers, map_jobs
from dlmlab.studies.prediff.adapt import adapt, held_out_nll
from dlmlab.studies.prediff.backbone import prepare
from dlmlab.studies.prediff.claims import compute_claims
from dlmlab.studies.prediff.evaluate import generate, lambada, prompts_and_references, sample_metrics, speed
from dlmlab.studies.prediff.figures import make_figures
from dlmlab.studies.prediff.presets import PRESETS
from dlmlab.studies.threads import threads_for
from dlmlab.training.distributed import is_main_process

TITLE = "PreDiff-LM: adapting a pretrained causal LM to masked diffusion with hybrid attention"


def _sample_keys(method: str, steps: list[int]) -> list[tuple[str, int | None]]:
    if METHODS[method].is_diffusion:
        return [(f"{method}@{s}", s) for s in steps]
    return [(method, None)]


def _adapt_job(name: str, backbone, stream: TokenStream, p, out: Path, progress: bool,
               eval_x: torch.Tensor) -> tuple[float, list[dict], float]:
    """One job (possibly on a worker process): adapt with ``name`` -> (held-out nll, curve, seconds)."""
    t1 = time.time()
    model, curve = adapt(name, backbone, stream, p, out, progress)
    nll = held_out_nll(name, model, eval_x, p.eval_prompt_len, p.eval_n_t, seed=1)
    return nll, curve, time.time() - t1


def run(preset: str, out: Path, progress: bool = True) -> StudyResult:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}")
    p = PRESETS[preset]
    p.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    backbone, tokenizer, stream, info = prepare(p, out, progress)
    eval_x = TokenStream.chunks(stream.val, p.seq_len, limit=p.eval_windows).to(p.device)
    prompts, refs = prompts_and_references(stream, p)
    res: dict = {"backbone": info["backbone"], "data": {k: v for k, v in info.items() if k != "backbone"},
                 "methods": {}, "samples": {}, "speed": {}, "eval_windows": len(eval_x)}
    # the adaptations are independent: they run on worker processes, then each finished model is reloaded here
    # from its last checkpoint
    jobs = [(name, backbone, stream, p, out, progress, eval_x) for name in p.methods]
    models = {}
    for name, (nll, curve, secs) in zip(p.methods, map_jobs(_adapt_job, jobs, default_workers(p.device), desc="adaptations",
                                                             progress=progress, threads=threads_for(p.model.d_model))):
        m = METHODS[name]
        res["methods"][name] = {"init": m.init, "attention": m.attention, "objective": m.objective,
                                "bound": m.is_diffusion, "val_nll": nll, "val_ppl": math.exp(nll), "curve": curve,
                                "seconds": secs}
        models[name] = adapt(name, backbone, stream, p, out, progress=False)[0]  # resumes at its last step

    # threshold: the best held-out bound the from-scratch model reaches within the budget
    if "scratch" in res["methods"]:
        thr = min(r["ppl"] for r in res["methods"]["scratch"]["curve"])
        res["threshold"] = {"value": thr, "steps": {n: steps_to_threshold(v["curve"], "ppl", thr)
                                                    for n, v in res["methods"].items()}}

    # samples and their metrics; the pretrained backbone is the fixed judge (gen PPL, MAUVE features)
    judge = backbone
    full_ref = torch.cat([prompts, refs], 1)
    ref_feats = mean_pooled_features(judge, refs.tolist())
    res["reference"] = {"gen_ppl": generative_perplexity(judge, full_ref.to(p.device), p.sample_prompt_len),
                        "rep4": rep_n(refs.tolist(), 4), "self_bleu": self_bleu([tokenizer.decode(r.tolist()) for r in refs])}
    texts: dict[str, list[str]] = {"reference": [tokenizer.decode(r.tolist()) for r in refs]}
    jobs = [(name, key, s) for name in p.methods for key, s in _sample_keys(name, p.sample_steps)]
    for name, key, steps in tqdm(jobs, desc="sampling", disable=not progress, leave=False):
        samples = generate(name, models[name], prompts, p, steps)
        res["samples"][key] = sample_metrics(samples, refs, judge, tokenizer, p, ref_feats)
        res["speed"][key] = speed(name, models[name], prompts, p, steps)
        texts[key] = [tokenizer.decode(s[p.sample_prompt_len:].tolist()) for s in samples]
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

    claims = compute_claims(res)
    figures = make_figures(res, out)
    result = StudyResult(
        study="prediff", preset=preset, config=dataclasses.asdict(p), results=res, tables=tables(res, p),
        figures=figures, claims=claims, wall_time_s=time.time() - t0, setup=setup_text(p, info))
    write_study(out, result, TITLE)
    return result


def setup_text(p, info: dict) -> str:
    b = info["backbone"]
    src = (f"a GPT-2-architecture AR model ({b.get('params', 0):,} parameters, d_model {p.model.d_model}, "
           f"{p.model.n_layers} layers) pretrained here for {p.pretrain.steps} steps on {p.corpus} with a "
           f"{info['tokenizer_vocab']}-token BPE, exported in Hugging Face GPT-2 format and loaded back"
           if b.get("source") == "pretrained here" else f"the {b['kind']} checkpoint at {b['source']}")
    return (f"Backbone: {src}.  Each method then trains {p.adapt.steps} steps (batch {p.adapt.batch_size}, windows of "
            f"{p.seq_len} tokens, prompt length uniform in [1, {p.seq_len // 2}]; lr {p.adapt.lr}, from-scratch lr "
            f"{p.scratch_lr}).  Held-out PPL: {p.eval_windows} validation windows, target = tokens after the first "
            f"{p.eval_prompt_len}; diffusion numbers are Monte-Carlo ELBO bounds ({p.eval_n_t} antithetic t draws "
            f"per window, self-conditioning on).  Samples: {p.n_prompts} held-out prompts of {p.sample_prompt_len} "
            f"tokens, {p.gen_len} generated tokens, temperature {p.temperature}, top-p {p.top_p}; generative PPL and "
            f"MAUVE features come from the pretrained backbone.  Tokens/s: batch {p.speed_batch}, median of "
            f"{p.speed_repeats} runs on {p.device}.")


def _f(x, d=2):
    return None if x is None else round(float(x), d)


def tables(res: dict, p) -> list[Table]:
    thr = res.get("threshold", {})
    main = Table(
        "Main results: held-out perplexity after the same adaptation budget",
        ["method", "init", "attention", "objective", "PPL", "PPL kind",
         f"gen PPL ({p.sample_steps[0]} steps)", f"MAUVE ({p.sample_steps[-1]} steps)", "steps to threshold"],
        [], note=f"threshold = best held-out bound of MDLM from scratch within the budget ({_f(thr.get('value'))}); "
                 "AR control samples are decoded token by token.")
    for n, m in res["methods"].items():
        first = res["samples"].get(f"{n}@{p.sample_steps[0]}") or res["samples"].get(n, {})
        last = res["samples"].get(f"{n}@{p.sample_steps[-1]}") or res["samples"].get(n, {})
        main.rows.append([n, m["init"], m["attention"], m["objective"], _f(m["val_ppl"]),
                          "ELBO bound" if m["bound"] else "exact", _f(first.get("gen_ppl")), _f(last.get("mauve"), 3),
                          thr.get("steps", {}).get(n)])
    ar_speed = res["speed"].get("ar_control", {}).get("tokens_per_s")
    samp = Table("Samples: quality, diversity and speed",
                 ["method", "gen PPL", "Rep-4", "Self-BLEU", "MAUVE", "tokens/s", "speed vs AR", "prompt KV reused"], [])
    ref = res.get("reference", {})
    samp.rows.append(["held-out text", _f(ref.get("gen_ppl")), _f(ref.get("rep4"), 3), _f(ref.get("self_bleu")),
                      None, None, None, None])
    for key, s in res["samples"].items():
        sp = res["speed"].get(key, {})
        tps = sp.get("tokens_per_s")
        samp.rows.append([key, _f(s["gen_ppl"]), _f(s["rep4"], 3), _f(s["self_bleu"]), _f(s["mauve"], 3), _f(tps, 1),
                          None if tps is None or not ar_speed else _f(tps / ar_speed), sp.get("prompt_kv_reused")])
    return [main, samp]
