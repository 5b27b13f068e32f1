"""Few-step diffusion sampling vs KV-cached AR decoding: generated tokens / s on the same backbone, one run.

The backbone has the PreDiff cpu preset's shape (GPT-2 architecture, d_model 128, 4 layers,
4 heads, MLP 512, BPE vocab 1024) or is loaded from a study run (``--backbone RUN/backbone``,
a HF GPT-2 directory).  Speed does not depend on the weights' values.  AR: the prompt is encoded
once, then one single-token forward per generated token.  Diffusion: the prompt's keys/values
are computed once (hybrid mask) and each of the ``steps`` denoising passes runs only the target
positions; self-conditioning, top-p and float64 Gumbel sampling included.  Repeats are
interleaved and the median is reported.

Target: 8-step diffusion >= 1.5x the tokens/s of AR decoding at batch 1 (latency setting).  On
CPU large batches are compute bound and diffusion recomputes all target positions at every
step, so the batch-16 row is reported as measured, without a target.

    flock /tmp/dlmlab-cpu.lock .venv/bin/python benchmarks/bench_sampling.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dlmlab.models import Transformer, TransformerConfig
from dlmlab.prediff import PreDiffLM
from dlmlab.sampling import DiffusionSampleConfig, sample_ar, sample_diffusion

TARGET = 1.5


def backbone(path: str | None) -> Transformer:
    if path:
        from dlmlab.models.hf_gpt2 import load_gpt2

        return load_gpt2(path)
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=1024, d_model=128, n_layers=4, n_heads=4, d_mlp=512,
                                         max_seq_len=128)).eval()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", help="HF GPT-2 directory (e.g. a prediff run's backbone/)")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--gen-len", type=int, default=48)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--steps", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    bb = backbone(args.backbone)
    model = PreDiffLM(bb).eval()
    V = bb.cfg.vocab_size
    rows, ok = [], True
    for B in args.batches:
        prompt = torch.randint(0, V, (B, args.prompt_len), generator=torch.Generator().manual_seed(B))
        fns = {"AR (KV cache)": lambda: sample_ar(bb, prompt, args.gen_len, 1.0, 0.95, torch.Generator().manual_seed(0))}
        for s in args.steps:
            cfg = DiffusionSampleConfig(steps=s, temperature=1.0, top_p=0.95)
            fns[f"diffusion {s} steps"] = (lambda c: lambda: sample_diffusion(model, prompt, args.gen_len, c,
                                                                              torch.Generator().manual_seed(0)))(cfg)
        times = {k: [] for k in fns}
        for f in fns.values():
            f()  # warm-up
        for _ in range(args.repeats):
            for k, f in fns.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        ar = B * args.gen_len / statistics.median(times["AR (KV cache)"])
        for k, ts in times.items():
            tps = B * args.gen_len / statistics.median(ts)
            target = ""
            if k == "diffusion 8 steps" and B == 1:
                met = tps / ar >= TARGET
                ok &= met
                target = f">= {TARGET}x: {'met' if met else 'NOT met'}"
            rows.append((B, k, tps, tps / ar, target))
    print(f"threads={torch.get_num_threads()} prompt={args.prompt_len} gen={args.gen_len} repeats={args.repeats} "
          f"params={bb.num_params():,}")
    print(f"{'batch':>5} | {'sampler':<20} | {'tokens/s':>10} | {'vs AR':>6} | target")
    print("-" * 68)
    for B, k, tps, rel, target in rows:
        print(f"{B:>5} | {k:<20} | {tps:>10.1f} | {rel:>5.2f}x | {target}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
