"""Cost of looking inside the denoising loop: a trajectory cache and an intervention against a plain decode.

Two bidirectional Transformers (random weights: the cost does not depend on them): ``big`` (d_model 256,
4 layers, 8 heads, MLP 1024) and ``small`` (d_model 64, 3 layers, 4 heads, MLP 256: on a small model the
per-step bookkeeping weighs most against the forward).  Each decodes a batch of 8 canvases of 32 prompt + 96
masked positions in 16 steps (cosine schedule, confidence order, kv_reuse ``none``) five ways, timed in
interleaved rounds (:func:`dlmlab.metrics.speed.interleaved_times`):

* ``plain``: ``decode`` with no hooks (the reference);
* ``record``: ``decode(record=True)``: the per-step records alone (entropy, top-5 alternatives);
* ``traced``: ``run_sampler_with_cache`` of one hook point (``blocks.2.resid_post``; ``blocks.1`` on the
  small model) at every step, every position, with the per-step records it keeps;
* ``traced, masked f16``: the same, masked positions only, float16;
* ``intervention``: ``decode`` with an ``Intervention`` adding a vector at that point at every step on the
  masked positions.

Targets, on each model: traced <= 1.1x plain, intervention <= 1.2x plain.  Prints a table per model, exits 1
when a target is missed.
The targets are judged on the ratio of the fastest round of each in CPU time (``time.thread_time`` of the one
decoding thread: on a shared, loaded machine the wall time counts the other processes' turns, and a median
moves by more than the 10% being measured); the median wall times' ratio is printed beside it.  Compare the
ratios within one run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_trajectory.py [--model big|small|all] [--repeats 11]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from dlmlab.metrics.speed import interleaved_times
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.sampling import DecodeConfig, Intervention, decode, run_sampler_with_cache

TARGETS = {"traced": 1.1, "intervention": 1.2}
MODELS = {"big": dict(d_model=256, n_layers=4, n_heads=8, d_mlp=1024, point="blocks.2.resid_post"),
          "small": dict(d_model=64, n_layers=3, n_heads=4, d_mlp=256, point="blocks.1.resid_post")}


def bench(name: str, a) -> bool:
    """Time one model's five decodes in interleaved rounds, print its table -> True when its targets hold."""
    spec = dict(MODELS[name])
    point = spec.pop("point")
    torch.manual_seed(0)
    V = 512
    model = Transformer(TransformerConfig(vocab_size=V, max_seq_len=128, attn_mask="bidirectional",
                                          positions="rope", **spec)).eval()
    mask = V - 1
    canvas = torch.randint(0, mask, (a.batch, 128), generator=torch.Generator().manual_seed(1))
    canvas[:, 32:] = mask
    cfg = DecodeConfig(steps=a.steps)
    push = [Intervention(point, torch.randn(spec["d_model"], generator=torch.Generator().manual_seed(2)),
                         positions="masked")]

    def g():
        return torch.Generator().manual_seed(0)

    fns = {
        "plain": lambda: decode(model, canvas, 32, cfg, g(), mask_id=mask),
        "record": lambda: decode(model, canvas, 32, cfg, g(), mask_id=mask, record=True),
        "traced": lambda: run_sampler_with_cache(model, canvas, 32, cfg, g(), mask_id=mask, names_filter=[point]),
        "traced, masked f16": lambda: run_sampler_with_cache(model, canvas, 32, cfg, g(), mask_id=mask,
                                                             names_filter=[point], positions="masked",
                                                             dtype="float16"),
        "intervention": lambda: decode(model, canvas, 32, cfg, g(), mask_id=mask, interventions=push),
    }
    cpu: dict[str, list[float]] = {k: [] for k in fns}

    def on_cpu(k: str, f):
        def run():
            t0 = time.thread_time()
            f()
            cpu[k].append(time.thread_time() - t0)
        return run

    wall = interleaved_times({k: on_cpu(k, f) for k, f in fns.items()}, repeats=a.repeats, warmup=1)
    cpu = {k: v[1:] for k, v in cpu.items()}  # the warm-up round is not timed
    base_cpu, base_wall = min(cpu["plain"]), statistics.median(wall["plain"])
    ok_all = True
    print(f"| {name} model (d_model {spec['d_model']}, {spec['n_layers']} layers): decode ({a.batch} x 128 "
          f"positions, {a.steps} steps, {a.threads} thread(s), {a.repeats} rounds) "
          "| fastest CPU s | ratio (fastest CPU) | median wall s | ratio (median wall) | target |")
    print("|---|---|---|---|---|---|")
    for what in fns:
        fast, med = min(cpu[what]), statistics.median(wall[what])
        ratio = fast / base_cpu
        target = TARGETS.get(what)
        ok = target is None or ratio <= target
        ok_all &= ok
        print(f"| {what} | {fast:.3f} | {ratio:.3f} | {med:.3f} | {med / base_wall:.3f} | "
              f"{'' if target is None else f'<= {target}'}{'' if ok else ' MISSED'} |")
    return ok_all


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=[*MODELS, "all"], default="all")
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    ok = True
    for name in (MODELS if a.model == "all" else [a.model]):
        ok &= bench(name, a)
        print()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
