"""Masked-diffusion decoders vs KV-cached AR decoding on one backbone: speed and quality, one run.

A GPT-2-architecture backbone of the PreDiff cpu preset's shape (d_model 128, 4 layers, BPE vocab 1024)
is pretrained as an AR model on Tiny Shakespeare and adapted to a PreDiff-LM (hybrid attention) with
the study's own code, under ``--work`` (re-runs resume from its checkpoints and skip training).
Every decoder then continues held-out prompts with temperature 1 and top-p 0.95:

* speed: generated tokens / s at batch 1 and 16 (median of interleaved repeats) and model forward
  calls per generated token;
* quality: generative perplexity of the samples under the AR backbone, and the PreDiff model's own
  ELBO perplexity bound of its samples (the AR row shows the bound of the AR samples).

Targets on open text (CPU): a diffusion decoder whose generative perplexity is within 10% of the 32-step
baseline reaches >= 3x the AR tokens/s at batch 1 and >= 1x at batch 16.  The script prints the tables,
exits 1 when any target is missed, and writes ``docs/figures/sampling_speed_quality.png``,
``docs/figures/sampling_workloads.png`` and ``docs/sampling_results.md`` (unless ``--no-docs``).  Timings
on a shared machine vary: compare the ratios within one run, not absolute numbers across runs.

Two more workloads on which a small model is confident, each with a matched pair of tiny Transformers
(same shape, data, steps and seed: a causal AR model and a bidirectional MDLM model, trained here in
seconds and cached under ``runs/bench_sampling/`` by a hash of their settings), decoded greedily with
``gen_len`` = the target length (completion + end token); tokens and forwards are counted up to each
row's first end token, and accuracy is the exact match of the completion (:mod:`dlmlab.tasks.completion`):

* induction (:func:`~dlmlab.tasks.completion.induction_pairs`): random symbols, then their repeat.
  Targets: a diffusion decoder within 1 point of the AR model's exact match reaches >= 3x the AR
  tokens/s at batch 1 and >= 1x at batch 16.
* sorting (:mod:`dlmlab.tasks.sorting`): the output tokens depend on each other; reported (no target):
  exact match against tokens per forward for several thresholds and fixed step counts.

    flock /tmp/dlmlab-cpu.lock .venv/bin/python benchmarks/bench_sampling.py
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from dlmlab.metrics import ar_nll_per_window
from dlmlab.metrics.speed import interleaved_times
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives import ARObjective, get_schedule, mdlm_loss
from dlmlab.prediff import eval_nelbo_per_window
from dlmlab.sampling import DecodeConfig, DiffusionSampleConfig, generate, sample_ar, sample_diffusion
from dlmlab.sampling.deviation import kv_reuse_deviation
import dlmlab.studies.prediff.adapt as prediff_adapt
import dlmlab.studies.prediff.backbone as prediff_backbone
from dlmlab.studies.prediff.presets import PRESETS
from dlmlab.tasks.completion import CompletionVocab, exact_match, induction_pairs, tokens_to_end
from dlmlab.tasks.sorting import sorting_pairs
from dlmlab.training import TrainConfig, train

SPEED_B1, SPEED_B16, QUALITY_TOL = 3.0, 1.0, 0.10
BASELINE = "diffusion 32 steps"
ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ACC_TOL = 0.01  # "equal exact match": within 1 point (absolute) of the AR model's
WEIGHTS = ROOT / "runs" / "bench_sampling"  # trained task models, one file per settings hash (runs/ is gitignored)
WEIGHTS_VERSION = 1  # bump when the training code below changes what a hash's weights are


def models(work: Path, pretrain_steps: int, adapt_steps: int):
    """(AR backbone, PreDiff-LM, token stream) trained (or resumed) under ``work``; the shape is pinned here
    (the PreDiff cpu preset's shape when this benchmark was written), the training recipe is the preset's."""
    p = PRESETS["cpu"]
    def budget(tc, steps):
        return dataclasses.replace(tc, steps=steps, warmup_steps=min(tc.warmup_steps, steps // 10), progress=False)

    shape = TransformerConfig(d_model=128, n_layers=4, n_heads=4, d_mlp=512, mlp="gelu_new", max_seq_len=128)
    p = dataclasses.replace(p, model=shape, bpe_vocab=1024, seq_len=64, pretrain=budget(p.pretrain, pretrain_steps),
                            adapt=budget(p.adapt, adapt_steps), seeds=[0])
    bb, _tok, stream, _info = prediff_backbone.prepare(p, work, progress=False)
    model, _ = prediff_adapt.adapt("prediff", bb, stream, p, work, progress=False)
    return bb.eval(), model.eval(), stream


def decoders(bb, model, gen_len: int) -> dict:
    """name -> fn(prompt [B,P], generator) -> (tokens [B,P+gen_len], forward calls)."""
    def ar(prompt, g):
        return sample_ar(bb, prompt, gen_len, 1.0, 0.95, g), gen_len

    def old(steps):
        return lambda prompt, g: (sample_diffusion(model, prompt, gen_len, DiffusionSampleConfig(steps=steps, top_p=0.95),
                                                   g), steps + 1)

    def new(**kw):
        cfg = DecodeConfig(top_p=0.95, **kw)

        def fn(prompt, g):
            res = generate(model, prompt, gen_len, cfg, g)
            return res.tokens, res.forwards
        return fn

    return {
        "AR (KV cache)": ar,
        BASELINE: old(32),
        "diffusion 8 steps": old(8),
        "threshold 0.9 (prompt cache, exact)": new(threshold=0.9, kv_reuse="prompt"),
        "threshold 0.9, block 16 (prefix, exact)": new(threshold=0.9, block_len=16, kv_reuse="prefix"),
        "threshold 0.9, block 16 (dual, approx)": new(threshold=0.9, block_len=16, kv_reuse="dual"),
        "threshold 0.5, block 16 (dual, approx)": new(threshold=0.5, block_len=16, kv_reuse="dual"),
        "threshold 0.3, block 16 (dual, approx)": new(threshold=0.3, block_len=16, kv_reuse="dual"),
        "factor 1.0, block 16 (prefix, exact)": new(factor=1.0, block_len=16, kv_reuse="prefix"),
        "12 steps, block 16 (prefix, exact)": new(steps=12, block_len=16, kv_reuse="prefix"),
        "12 steps, block 16 (dual, approx)": new(steps=12, block_len=16, kv_reuse="dual"),
    }


def quality(name: str, fn, bb, model, prompts: torch.Tensor, P: int) -> dict:
    samples, forwards = [], []
    g = torch.Generator().manual_seed(0)
    for xb in prompts.split(16):
        out, f = fn(xb, g)
        samples.append(out)
        forwards.append(f)
    x = torch.cat(samples)
    gen_ppl = math.exp(ar_nll_per_window(bb, x, P).mean().item())
    elbo = math.exp(eval_nelbo_per_window(model, x, P, n_t=4, seed=0).mean().item())
    return {"gen_ppl": gen_ppl, "elbo_ppl": elbo}


def speed(fns: dict, prompt: torch.Tensor, gen_len: int, repeats: int) -> dict:
    """name -> {"tps": tokens/s (median), "fpt": forward calls per generated token}."""
    times = {k: [] for k in fns}
    calls = {}
    for k, f in fns.items():  # warm-up
        calls[k] = f(prompt, torch.Generator().manual_seed(0))[1]
    for r in range(repeats):
        for k, f in fns.items():
            g = torch.Generator().manual_seed(r)
            t0 = time.perf_counter()
            f(prompt, g)
            times[k].append(time.perf_counter() - t0)
    B = prompt.shape[0]
    return {k: {"tps": B * gen_len / statistics.median(ts), "fpt": calls[k] / gen_len} for k, ts in times.items()}


TARGETS = {1: SPEED_B1, 16: SPEED_B16}  # batch -> tokens/s relative to AR that a decoder within the bound must reach


def judge(rows: list[dict], B: int, within, workload: str, bound: str, kind: str) -> tuple[bool | None, str]:
    """Speed rows ({batch, name, rel, ...}) -> (target of batch ``B`` met: the fastest diffusion decoder whose
    row passes ``within`` reaches ``TARGETS[B]`` x AR; None when ``B`` has no target, verdict line)."""
    need = TARGETS.get(B)
    if need is None:
        return None, ""
    good = [r for r in rows if r["batch"] == B and not r["name"].startswith("AR") and within(r)]
    best = max(good, key=lambda r: r["rel"], default=None)
    met = best is not None and best["rel"] >= need
    return met, (f"{workload}, batch {B}: >= {need:g}x AR at {bound}: {'met' if met else 'NOT met'}"
                 + (f"; fastest decoder within the {kind} bound: '{best['name']}' ({best['rel']:.2f}x)" if best
                    else f"; no diffusion decoder is within the {kind} bound"))


def figure(rows: list[dict], base: float, out: Path) -> None:
    """Two panels (batch 1, 16): generative PPL vs speed relative to AR, one colour per decoder, target lines."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    from dlmlab.report.figures import new_figure, save_figure

    names = list(dict.fromkeys(r["name"] for r in rows))
    colours = {n: plt.get_cmap("tab20")(i % 20) for i, n in enumerate(names)}
    fig, axes = new_figure(ncols=2, nrows=2, width=5.0, height=2.9)
    for ax, B in zip(axes[0], (1, 16)):
        for r in (r for r in rows if r["batch"] == B):
            marker = "s" if r["name"].startswith("AR") else ("^" if "approx" in r["name"] else "o")
            ax.scatter(r["rel"], r["gen_ppl"], marker=marker, color=colours[r["name"]], label=r["name"], s=36)
        ax.axvline(SPEED_B1 if B == 1 else SPEED_B16, ls="--", lw=0.8, color="grey")
        ax.axhline(base * (1 + QUALITY_TOL), ls=":", lw=0.8, color="grey")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("tokens / s relative to AR (KV cache)")
        ax.set_ylabel("gen. PPL (AR backbone)")
        ax.set_title(f"batch {B} (target: right of dashed, below dotted)", fontsize=9)
    for ax in axes[1]:
        ax.axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    axes[1][0].legend(handles, labels, loc="upper left", ncol=2, fontsize=8, frameon=False, bbox_to_anchor=(0.0, 1.0))
    save_figure(fig, out, "sampling_speed_quality",
                "Speed vs quality of masked-diffusion decoders on one backbone (benchmarks/bench_sampling.py)")


# ---------------------------------------------------------------------------------------------------------------
# Confident workloads: induction (a target) and sorting (dependent outputs, reported)


@dataclasses.dataclass(frozen=True)
class Workload:
    """A completion task and the matched pair of tiny Transformers trained on it (AR and MDLM: same shape,
    batches, steps and seed)."""

    task: str  # "induction" | "sorting"
    n: int  # symbols in the prompt body and in the completion body
    n_symbols: int
    d_model: int = 64
    n_layers: int = 2
    steps: int = 300
    batch: int = 64
    lr: float = 3e-3
    seed: int = 0

    @property
    def vocab(self) -> CompletionVocab:
        return CompletionVocab(self.n_symbols)

    def pairs(self, batch: int, gen: torch.Generator):
        """(prompt [B,n+1], target [B,n+1])."""
        return (induction_pairs if self.task == "induction" else sorting_pairs)(batch, self.n, self.vocab, gen)


WORKLOADS = {"induction": Workload("induction", n=24, n_symbols=32, steps=300),
             "sorting": Workload("sorting", n=12, n_symbols=16, steps=400)}
EVAL_SEED = 2**40  # held-out examples (training batches use seeds seed * 1_000_003 + step)


def task_model(w: Workload, kind: str, weights: Path) -> Transformer:
    """The ``kind`` ("ar": causal, next-token loss; "mdlm": bidirectional, masked-diffusion loss on the
    completion only) model of ``w``, trained with :func:`dlmlab.training.train` or loaded from ``weights``."""
    voc = w.vocab
    cfg = TransformerConfig(vocab_size=voc.model_vocab, d_model=w.d_model, n_layers=w.n_layers, n_heads=4,
                            d_mlp=4 * w.d_model, attn_mask="causal" if kind == "ar" else "bidirectional",
                            max_seq_len=2 * w.n + 2)
    tc = TrainConfig(steps=w.steps, batch_size=w.batch, lr=w.lr, warmup_steps=w.steps // 10, seed=w.seed,
                     log_every=w.steps, progress=False)
    key = json.dumps({"v": WEIGHTS_VERSION, "workload": dataclasses.asdict(w), "kind": kind,
                      "model": dataclasses.asdict(cfg), "train": dataclasses.asdict(tc)}, sort_keys=True, default=str)
    path = weights / f"{w.task}-{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"
    torch.manual_seed(w.seed)
    model = Transformer(cfg)
    if path.exists():
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        return model.eval()
    sched = get_schedule("linear")
    P = w.n + 1

    def batches(step: int, gen: torch.Generator) -> torch.Tensor:
        prompt, target = w.pairs(w.batch, gen)
        return torch.cat([prompt, target], 1)

    class TargetMasked:
        """MDLM on the target only (the prompt is never masked): a custom objective (no card)."""

        name = "mdlm_target"

        def make_batch(self, x, gen, step=0, **extra):
            return {"x": x, "t": sched.sample_t(w.batch, gen), "u": torch.rand(x.shape, generator=gen)}

        def loss(self, net, b):
            maskable = torch.zeros_like(b["x"], dtype=torch.bool)
            maskable[:, P:] = True
            return mdlm_loss(net, b["x"], voc.mask_id, t=b["t"], noise=b["u"], maskable=maskable, schedule=sched)

    t0 = time.perf_counter()
    with torch.enable_grad():
        train(model, tc, batches, ARObjective() if kind == "ar" else TargetMasked())
    print(f"trained {w.task} {kind} ({w.steps} steps) in {time.perf_counter() - t0:.1f} s -> {path}", file=sys.stderr)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    tmp.replace(path)
    return model.eval()


def row_forwards(when: torch.Tensor, out: torch.Tensor, end: int, res) -> torch.Tensor:
    """Commit steps [B,L] of the generated positions -> each row's forwards up to its first end token [B].

    Each step in which a row is still decoding runs one forward for it and commits at least one of its
    positions, so the row's forwards until its last position up to the first end token is committed are the
    distinct steps at which it committed (plus the prompt's own forward when an exact prompt cache ran one)."""
    upto = torch.arange(out.shape[1])[None] < tokens_to_end(out, end)[:, None]
    last = when.masked_fill(~upto, -1).max(1).values
    extra = 1 if res.kv_reuse == "prompt" and res.exactness == "exact" else 0
    return torch.tensor([len(set(w[w <= t].tolist())) + extra for w, t in zip(when, last)])


def task_decoders(ar_model, mdlm_model, voc: CompletionVocab, L: int, specs: dict) -> dict:
    """name -> fn(prompt [B,P], track) -> (completion [B,L], forward calls, per-row forwards up to the first end
    token [B] when ``track``, else None).

    ``specs``: name -> DecodeConfig keywords (greedy, mask id of ``voc``); the AR model (KV cache) comes first."""
    def ar(prompt, track=False):
        out = sample_ar(ar_model, prompt, L, 0.0)[:, prompt.shape[1]:]
        return out, L, tokens_to_end(out, voc.end) if track else None  # the k-th token is the k-th forward's

    def diffusion(kw):
        cfg = DecodeConfig(temperature=0.0, **kw)

        def fn(prompt, track=False):
            P = prompt.shape[1]
            if not track:
                res = generate(mdlm_model, prompt, L, cfg, mask_id=voc.mask_id)
                return res.tokens[:, P:], res.forwards, None
            when = torch.full((prompt.shape[0], L), -1)

            def note(rec):  # the step at which each generated position was committed
                when[rec.committed[:, P:]] = rec.step
            res = generate(mdlm_model, prompt, L, cfg, mask_id=voc.mask_id, callback=note)
            return res.tokens[:, P:], res.forwards, row_forwards(when, res.tokens[:, P:], voc.end, res)
        return fn

    return {"AR (KV cache)": ar, **{name: diffusion(kw) for name, kw in specs.items()}}


INDUCTION = {
    "threshold 0.9 (no cache, exact)": dict(threshold=0.9, kv_reuse="none"),
    "threshold 0.5 (no cache, exact)": dict(threshold=0.5, kv_reuse="none"),
    "factor 1.0 (no cache, exact)": dict(factor=1.0, kv_reuse="none"),
    "threshold 0.9, block 8 (dual, approx)": dict(threshold=0.9, block_len=8, kv_reuse="dual"),
    "1 step (no cache, exact)": dict(steps=1, kv_reuse="none"),
}


def sorting_specs(L: int) -> dict:
    """Thresholds, fixed step counts from one token per step (L: the target length) to all in one step, and
    one token per step left to right (blocks of 1: the AR model's order)."""
    return {**{f"threshold {th:g}": dict(threshold=th, kv_reuse="none") for th in (0.99, 0.9, 0.7, 0.5, 0.3)},
            **{f"{k} step{'s' if k > 1 else ''}": dict(steps=k, kv_reuse="none") for k in (L, 4, 2, 1)},
            "left to right (block 1)": dict(steps=L, block_len=1, kv_reuse="none")}


def task_accuracy(fns: dict, prompts: torch.Tensor, targets: torch.Tensor, end: int, batch: int = 64) -> dict:
    """name -> {"acc": exact match, "tpf": tokens / forward per row, both up to the first end token}."""
    out = {}
    for name, fn in fns.items():
        hits, toks, fwds = [], 0, 0
        for p, t in zip(prompts.split(batch), targets.split(batch)):
            gen, _calls, per_row = fn(p, track=True)
            hits.append(exact_match(gen, t, end))
            toks += int(tokens_to_end(gen, end).sum())
            fwds += int(per_row.sum())
        out[name] = {"acc": float(torch.cat(hits).float().mean()), "tpf": toks / fwds}
    return out


def task_speed(fns: dict, prompt: torch.Tensor, end: int, repeats: int) -> dict:
    """name -> {"tps": tokens up to the first end token / s (median of interleaved rounds), "tpfc": those tokens
    per row per forward call of the batch}."""
    counts = {}
    for name, fn in fns.items():
        gen, calls, _ = fn(prompt)
        n = int(tokens_to_end(gen, end).sum())
        counts[name] = (n, n / prompt.shape[0] / calls)
    times = interleaved_times({k: (lambda f=f: f(prompt)) for k, f in fns.items()}, repeats=repeats, warmup=0)
    return {k: {"tps": counts[k][0] / statistics.median(ts), "tpfc": counts[k][1]} for k, ts in times.items()}


def run_workloads(args, weights: Path) -> tuple[dict, list[str], bool]:
    """Train / load the task models, measure, judge -> ({task: rows}, verdicts, all targets met)."""
    results, verdicts, ok = {}, [], True
    for task in args.tasks:
        w = WORKLOADS[task]
        voc = w.vocab
        ar_m, dm = task_model(w, "ar", weights), task_model(w, "mdlm", weights)
        prompts, targets = w.pairs(args.task_examples, torch.Generator().manual_seed(EVAL_SEED))
        L = w.n + 1
        fns = task_decoders(ar_m, dm, voc, L, INDUCTION if task == "induction" else sorting_specs(L))
        acc = task_accuracy(fns, prompts, targets, voc.end)
        rows = []
        if task == "induction":
            for B in args.batches:
                sp = task_speed(fns, prompts[:B], voc.end, args.repeats)
                ar = sp["AR (KV cache)"]["tps"]
                rows += [{"batch": B, "name": k, **sp[k], "rel": sp[k]["tps"] / ar, **acc[k]} for k in fns]
            ar_acc = acc["AR (KV cache)"]["acc"]
            bound = f"exact match >= {ar_acc - ACC_TOL:.3f} (AR {ar_acc:.3f} - {ACC_TOL:g})"
            for B in args.batches:
                met, line = judge(rows, B, lambda r: r["acc"] >= ar_acc - ACC_TOL, "induction", bound, "accuracy")
                if met is not None:
                    ok &= met
                    verdicts.append(line)
        else:
            rows = [{"name": k, **acc[k]} for k in fns]
        results[task] = rows
    return results, verdicts, ok


def workloads_figure(results: dict, out: Path) -> None:
    """Induction: tokens/s relative to AR per decoder at batch 1 and 16 (bars; exact match in the labels);
    sorting: exact match vs tokens / forward."""
    from dlmlab.report.figures import new_figure, save_figure

    fig, axes = new_figure(ncols=2, width=5.2, height=3.4)
    ax = axes[0][0]
    ind = results.get("induction", [])
    names = list(dict.fromkeys(r["name"] for r in ind))
    batches = sorted({r["batch"] for r in ind})
    h = 0.8 / max(1, len(batches))
    for bi, B in enumerate(batches):
        rel = {r["name"]: r["rel"] for r in ind if r["batch"] == B}
        ax.barh([i + bi * h for i in range(len(names))], [rel[n] for n in names], height=h, label=f"batch {B}")
        need = TARGETS.get(B)
        if need is not None:
            ax.axvline(need, ls="--", lw=0.8, color=f"C{bi}")
    acc = {r["name"]: r["acc"] for r in ind}
    ax.set_yticks([i + h * (len(batches) - 1) / 2 for i in range(len(names))])
    ax.set_yticklabels([f"{n} [EM {acc[n]:.2f}]" for n in names], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("tokens / s relative to AR (KV cache)")
    ax.set_title("induction (dashed: the batch's target)", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    ax = axes[0][1]
    srt = results.get("sorting", [])
    for kind, marker in (("threshold", "o-"), ("step", "^-"), ("left to right", "D"), ("AR", "s")):
        pts = sorted((r["tpf"], r["acc"]) for r in srt if kind in r["name"])
        if pts:
            label = {"AR": "AR (KV cache)", "left to right": "diffusion, left to right"}.get(kind,
                                                                                               f"diffusion, {kind}s")
            ax.plot(*zip(*pts), marker, label=label, ms=5)
    ax.set_xlabel("tokens / forward (per row, up to the end token)")
    ax.set_ylabel("exact match")
    ax.set_title("sorting: exact match vs parallel commits", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    save_figure(fig, out, "sampling_workloads",
                "Confident workloads: induction speed vs AR, sorting accuracy vs tokens per forward "
                "(benchmarks/bench_sampling.py)")


def render_workloads(results: dict, args) -> str:
    parts = []
    if "induction" in results:
        w = WORKLOADS["induction"]
        lines = [f"## Induction (a confident workload)\n\n{w.n} random symbols of {w.n_symbols}, a separator, then "
                 f"their repeat and an end token; matched AR / MDLM Transformers (d_model {w.d_model}, {w.n_layers} "
                 f"layers) trained {w.steps} steps at batch {w.batch}; greedy; exact match over {args.task_examples} "
                 "held-out examples.\n",
                 "| batch | decoder | tokens/s | vs AR | tokens / forward | exact match |",
                 "|---:|---|---:|---:|---:|---:|"]
        lines += [f"| {r['batch']} | {r['name']} | {r['tps']:.0f} | {r['rel']:.2f}x | {r['tpfc']:.2f} | "
                  f"{r['acc']:.3f} |" for r in results["induction"]]
        parts.append("\n".join(lines))
    if "sorting" in results:
        w = WORKLOADS["sorting"]
        lines = [f"## Sorting (dependent outputs)\n\n{w.n} random symbols of {w.n_symbols} (with repeats), a "
                 f"separator, then the same symbols sorted and an end token; matched models as above, trained "
                 f"{w.steps} steps; greedy; {args.task_examples} held-out examples; tokens / forward per row.\n",
                 "| decoder | tokens / forward | exact match |", "|---|---:|---:|"]
        lines += [f"| {r['name']} | {r['tpf']:.2f} | {r['acc']:.3f} |" for r in results["sorting"]]
        steps = sorted((r for r in results["sorting"] if r["name"].endswith(("step", "steps"))), key=lambda r: r["tpf"])
        if len(steps) > 1:
            one, most = steps[0], steps[-1]
            lines += ["", f"Accuracy cost of parallel commits (fixed steps, '{one['name']}' at {one['tpf']:.2f} "
                      f"tokens / forward -> '{most['name']}' at {most['tpf']:.2f}): exact match {one['acc']:.3f} -> "
                      f"{most['acc']:.3f} ({most['acc'] - one['acc']:+.3f}); AR "
                      f"{next(r['acc'] for r in results['sorting'] if r['name'].startswith('AR')):.3f}."]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/dlmlab-bench-sampling",
                    help="where the open-text models are trained / resumed")
    ap.add_argument("--weights", default=str(WEIGHTS), help="where the task models are cached (by settings hash)")
    ap.add_argument("--pretrain-steps", type=int, default=1000)
    ap.add_argument("--adapt-steps", type=int, default=300)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--gen-len", type=int, default=48)
    ap.add_argument("--quality-prompts", type=int, default=32)
    ap.add_argument("--task-examples", type=int, default=256, help="held-out examples per task workload")
    ap.add_argument("--tasks", nargs="*", default=["text", *WORKLOADS], choices=["text", *WORKLOADS],
                    help="which workloads to run (open text and the task workloads)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the ratios are what is compared)")
    ap.add_argument("--docs", default=str(DOCS), help="where sampling_results.md and figures/ are written")
    ap.add_argument("--no-docs", action="store_true", help="do not write the figures and tables")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    text = run_text(args) if "text" in args.tasks else None
    args.tasks = [t for t in args.tasks if t != "text"]
    torch.set_grad_enabled(False)
    results, task_verdicts, task_ok = run_workloads(args, Path(args.weights))
    ok = task_ok and (text is None or text["ok"])
    verdicts = (text["verdicts"] if text else []) + task_verdicts
    head = (f"threads={args.threads} repeats={args.repeats} batches={args.batches}; targets: "
            f"{'all met' if ok else 'NOT all met'} (verdicts at the end).  Every number below comes from one run of "
            "`python benchmarks/bench_sampling.py`; tokens/s is the median of interleaved repeats, so compare the "
            "ratios within a table, not absolute speeds across runs.  In the task tables tokens and forwards are "
            "counted up to each row's first end token.")
    body = [head]
    if text:
        body.append("## Open text (PreDiff cpu-scale model)\n\n" + text["table"])
    if results:
        body.append(render_workloads(results, args))
    body.append("## Targets\n\n" + "\n".join(f"- {v}" for v in verdicts))
    doc = "\n\n".join(body)
    print(doc)
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if not args.no_docs:
        docs = Path(args.docs)
        if text:
            figure(text["rows"], text["base"], docs)
        if results:
            workloads_figure(results, docs)
        (docs / "sampling_results.md").write_text(
            "<!-- written by benchmarks/bench_sampling.py; do not edit by hand -->\n" + doc + "\n")
    return 0 if ok else 1


def run_text(args) -> dict:
    """The open-text workload: {"rows", "table", "verdicts", "ok", "base"}."""
    bb, model, stream = models(Path(args.work), args.pretrain_steps, args.adapt_steps)
    torch.set_grad_enabled(False)
    P, L = args.prompt_len, args.gen_len
    from dlmlab.data import TokenStream

    prompts = TokenStream.chunks(stream.val, P + L, limit=max(args.quality_prompts, max(args.batches)))[:, :P]
    fns = decoders(bb, model, L)
    qual = {k: quality(k, f, bb, model, prompts[:args.quality_prompts], P) for k, f in fns.items()}
    rows = []
    for B in args.batches:
        sp = speed(fns, prompts[:B], L, args.repeats)
        ar = sp["AR (KV cache)"]["tps"]
        for k in fns:
            rows.append({"batch": B, "name": k, **sp[k], "rel": sp[k]["tps"] / ar, **qual[k]})
    dev = kv_reuse_deviation(model, torch.cat([prompts[:16], torch.full((16, L), model.mask_id)], 1), P,
                             DecodeConfig(threshold=0.9, block_len=16, kv_reuse="dual", top_p=0.95),
                             torch.Generator().manual_seed(0))
    base = qual[BASELINE]["gen_ppl"]
    ok, verdicts = True, []
    bound = f"gen. PPL <= {base * (1 + QUALITY_TOL):.1f} (32-step baseline {base:.1f} + 10%)"
    for B in args.batches:
        met, line = judge(rows, B, lambda r: r["gen_ppl"] <= base * (1 + QUALITY_TOL), "open text", bound, "quality")
        if met is not None:
            ok &= met
            verdicts.append(line)
    return {"rows": rows, "table": render(rows, dev, args, bb.num_params()), "verdicts": verdicts, "ok": ok,
            "base": base}


def render(rows: list[dict], dev: dict, args, params: int) -> str:
    head = (f"prompt={args.prompt_len} gen={args.gen_len} params={params:,} quality prompts={args.quality_prompts}; "
            "temperature 1, top-p 0.95\n\n")
    lines = ["| batch | decoder | tokens/s | vs AR | forwards / token | gen. PPL | own ELBO PPL |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['name']} | {r['tps']:.0f} | {r['rel']:.2f}x | {r['fpt']:.2f} | "
                     f"{r['gen_ppl']:.1f} | {r['elbo_ppl']:.1f} |")
    tail = ["", "Approximate dual cache (threshold 0.9, block 16) vs recomputing every position, per step: "
            f"max |logit diff| {dev['max_abs']:.3g}, mean {dev['mean_abs']:.3g}, top-1 agreement "
            f"{dev['top1_agree']:.3f} over {dev['steps']} steps."]
    return head + "\n".join(lines + tail)


if __name__ == "__main__":
    raise SystemExit(main())
