"""Masked-diffusion decoders vs KV-cached AR decoding on one backbone: speed and quality, one run.

A GPT-2-architecture backbone of the PreDiff cpu preset's shape (d_model 128, 4 layers, BPE vocab 1024)
is pretrained as an AR model on Tiny Shakespeare and adapted to a PreDiff-LM (hybrid attention) with
the study's own code, under ``--work`` (re-runs resume from its checkpoints and skip training).
Every decoder then continues held-out prompts with temperature 1 and top-p 0.95:

* speed: generated tokens / s at batch 1 and 16 (median of interleaved repeats) and model forward
  calls per generated token;
* quality: generative perplexity of the samples under the AR backbone, and the PreDiff model's own
  ELBO perplexity bound of its samples (the AR row shows the bound of the AR samples).

Targets (CPU): a diffusion decoder whose generative perplexity is within 10% of the 32-step baseline
reaches >= 3x the AR tokens/s at batch 1 and >= 1x at batch 16.  The script prints the table, exits 1
when a target is missed, and writes ``docs/figures/sampling_speed_quality.png`` and
``docs/sampling_results.md`` (unless ``--no-docs``).  Timings on a shared machine vary: compare the
ratios within one run, not absolute numbers across runs.

    flock /tmp/dlmlab-cpu.lock .venv/bin/python benchmarks/bench_sampling.py
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
from pathlib import Path

import torch

from dlmlab.metrics import ar_nll_per_window
from dlmlab.models import TransformerConfig
from dlmlab.prediff import eval_nelbo_per_window
from dlmlab.sampling import DecodeConfig, DiffusionSampleConfig, generate, sample_ar, sample_diffusion
from dlmlab.sampling.deviation import cache_deviation
import dlmlab.studies.prediff.adapt as prediff_adapt
import dlmlab.studies.prediff.backbone as prediff_backbone
from dlmlab.studies.prediff.presets import PRESETS

SPEED_B1, SPEED_B16, QUALITY_TOL = 3.0, 1.0, 0.10
BASELINE = "diffusion 32 steps"
DOCS = Path(__file__).resolve().parents[1] / "docs"


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
        "threshold 0.9 (prompt cache, exact)": new(threshold=0.9, cache="prompt"),
        "threshold 0.9, block 16 (prefix, exact)": new(threshold=0.9, block_len=16, cache="prefix"),
        "threshold 0.9, block 16 (dual, approx)": new(threshold=0.9, block_len=16, cache="dual"),
        "threshold 0.5, block 16 (dual, approx)": new(threshold=0.5, block_len=16, cache="dual"),
        "threshold 0.3, block 16 (dual, approx)": new(threshold=0.3, block_len=16, cache="dual"),
        "factor 1.0, block 16 (prefix, exact)": new(factor=1.0, block_len=16, cache="prefix"),
        "12 steps, block 16 (prefix, exact)": new(steps=12, block_len=16, cache="prefix"),
        "12 steps, block 16 (dual, approx)": new(steps=12, block_len=16, cache="dual"),
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/dlmlab-bench-sampling", help="where the models are trained / resumed")
    ap.add_argument("--pretrain-steps", type=int, default=1000)
    ap.add_argument("--adapt-steps", type=int, default=300)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--gen-len", type=int, default=48)
    ap.add_argument("--quality-prompts", type=int, default=32)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the ratios are what is compared)")
    ap.add_argument("--no-docs", action="store_true", help="do not write the figure and table under docs/")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
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
    dev = cache_deviation(model, torch.cat([prompts[:16], torch.full((16, L), model.mask_id)], 1), P,
                          DecodeConfig(threshold=0.9, block_len=16, cache="dual", top_p=0.95),
                          torch.Generator().manual_seed(0))
    base = qual[BASELINE]["gen_ppl"]
    ok, verdicts = True, []
    for B, need in ((1, SPEED_B1), (16, SPEED_B16)):
        if B not in args.batches:
            continue
        good = [r for r in rows if r["batch"] == B and not r["name"].startswith("AR")
                and r["gen_ppl"] <= base * (1 + QUALITY_TOL)]
        best = max(good, key=lambda r: r["rel"], default=None)
        met = best is not None and best["rel"] >= need
        ok &= met
        verdicts.append(f"batch {B}: >= {need:g}x AR at gen. PPL <= {base * (1 + QUALITY_TOL):.1f} (32-step "
                        f"baseline {base:.1f} + 10%): {'met' if met else 'NOT met'}"
                        + (f"; fastest decoder within the quality bound: '{best['name']}' ({best['rel']:.2f}x)"
                           if best else "; no diffusion decoder is within the quality bound"))
    table = render(rows, dev, verdicts, args, bb.num_params())
    print(table)
    if not args.no_docs:
        figure(rows, base, DOCS)
        (DOCS / "sampling_results.md").write_text(
            "<!-- written by benchmarks/bench_sampling.py; do not edit by hand -->\n" + table + "\n")
    return 0 if ok else 1


def render(rows: list[dict], dev: dict, verdicts: list[str], args, params: int) -> str:
    head = (f"threads={args.threads} prompt={args.prompt_len} gen={args.gen_len} repeats={args.repeats} "
            f"params={params:,} quality prompts={args.quality_prompts}\n\n")
    lines = ["| batch | decoder | tokens/s | vs AR | forwards / token | gen. PPL | own ELBO PPL |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['name']} | {r['tps']:.0f} | {r['rel']:.2f}x | {r['fpt']:.2f} | "
                     f"{r['gen_ppl']:.1f} | {r['elbo_ppl']:.1f} |")
    tail = ["", "Approximate dual cache (threshold 0.9, block 16) vs recomputing every position, per step: "
            f"max |logit diff| {dev['max_abs']:.3g}, mean {dev['mean_abs']:.3g}, top-1 agreement "
            f"{dev['top1_agree']:.3f} over {dev['steps']} steps.", ""] + [f"- {v}" for v in verdicts]
    return head + "\n".join(lines + tail)


if __name__ == "__main__":
    raise SystemExit(main())
