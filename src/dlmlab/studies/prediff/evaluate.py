"""Samples and sample metrics of the adapted models: generative PPL, Rep-4, Self-BLEU, MAUVE, tokens/s."""

from __future__ import annotations

import functools

import torch

from dlmlab.data import TokenStream
from dlmlab.metrics import (generative_perplexity, last_word_accuracy, mauve_score, mean_pooled_features, read_passages,
                            rep_n, self_bleu)
from dlmlab.metrics.speed import throughputs
from dlmlab.prediff import METHODS
from dlmlab.sampling import DiffusionSampleConfig, sample_ar, sample_diffusion
from dlmlab.studies.prediff.presets import PreDiffPreset


def prompts_and_references(stream: TokenStream, p: PreDiffPreset) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out windows -> prompts [N, P] and their true continuations [N, L]."""
    w = TokenStream.chunks(stream.val, p.sample_prompt_len + p.gen_len, limit=p.n_prompts)
    if len(w) < p.n_prompts:
        raise ValueError(f"validation split too short for {p.n_prompts} prompts of {p.sample_prompt_len + p.gen_len} tokens")
    return w[:, :p.sample_prompt_len], w[:, p.sample_prompt_len:]


def generate(method: str, model, prompts: torch.Tensor, p: PreDiffPreset, steps: int | None, seed: int = 0) -> torch.Tensor:
    """[N, P+L] samples of ``method`` (``steps`` denoising steps for diffusion; AR decodes token by token)."""
    g = torch.Generator().manual_seed(seed)
    prompts = prompts.to(p.device)
    if METHODS[method].is_diffusion:
        cfg = DiffusionSampleConfig(steps=steps, temperature=p.temperature, top_p=p.top_p)
        return sample_diffusion(model, prompts, p.gen_len, cfg, g).cpu()
    return sample_ar(model, prompts, p.gen_len, p.temperature, p.top_p, g).cpu()


def sample_metrics(samples: torch.Tensor, references: torch.Tensor, evaluator, featuriser, tokenizer, p: PreDiffPreset,
                   ref_features) -> dict:
    """Metrics of generated continuations: generative PPL under ``evaluator`` (a causal judge: the AR control),
    MAUVE on ``featuriser``'s (the pretrained backbone's) mean-pooled features, Rep-4, Self-BLEU."""
    P = p.sample_prompt_len
    gen = samples[:, P:]
    texts = [tokenizer.decode(s.tolist()) for s in gen]
    feats = mean_pooled_features(featuriser, [s.tolist() for s in gen])
    return {
        "gen_ppl": generative_perplexity(evaluator, samples.to(p.device), P),
        "rep4": rep_n([s.tolist() for s in gen], 4),
        "self_bleu": self_bleu(texts),
        "mauve": mauve_score(ref_features, feats),
    }


def speeds(keys: list[tuple[str, str, int | None]], models: dict, prompts: torch.Tensor, p: PreDiffPreset) -> dict:
    """Generated tokens / s of every ``(method, key, steps)`` for one batch of ``p.speed_batch`` prompts, timed
    interleaved (each of ``p.speed_repeats`` rounds runs every decoder once) so that machine load hits all alike;
    ``{key: throughputs entry + prompt_kv_reused}``."""
    batch = prompts[: p.speed_batch]
    fns = {key: functools.partial(generate, name, models[name], batch, p, steps) for name, key, steps in keys}
    res = throughputs(fns, batch.shape[0] * p.gen_len, repeats=p.speed_repeats, warmup=1)
    for name, key, _ in keys:
        res[key]["prompt_kv_reused"] = bool(METHODS[name].is_diffusion and models[name].attention == "hybrid")
    return res


def lambada(method: str, model, tokenizer, path, p: PreDiffPreset) -> dict:
    """Greedy last-word accuracy (AR decoding, or diffusion with one token committed per step, temperature 0)."""
    max_ctx = p.model.max_seq_len - 16

    def predict(ctx: torch.Tensor, n: int) -> torch.Tensor:
        ctx = ctx.to(p.device)
        if METHODS[method].is_diffusion:
            cfg = DiffusionSampleConfig(steps=n, temperature=0.0)
            return sample_diffusion(model, ctx, n, cfg)[0, ctx.shape[1]:].cpu()
        return sample_ar(model, ctx, n, temperature=0.0)[0, ctx.shape[1]:].cpu()

    return last_word_accuracy(predict, tokenizer, read_passages(path), limit=p.lambada_limit, max_context=max_ctx)
