"""Cost of looking inside the denoising loop: a trajectory cache and an intervention against a plain decode.

One bidirectional Transformer (d_model 256, 4 layers, 8 heads, MLP 1024; random weights: the cost does not
depend on them) decodes a batch of 8 canvases of 32 prompt + 96 masked positions in 32 steps (cosine
schedule, confidence order, cache ``none``) four ways, timed in interleaved rounds
(:func:`dlmlab.metrics.speed.interleaved_times`):

* ``plain``: ``decode`` with no hooks (the reference);
* ``traced``: ``run_sampler_with_cache`` of one hook point (``blocks.2.resid_post``) at every step, every
  position, with the per-step records (entropy, top-5) it keeps;
* ``traced, masked f16``: the same, masked positions only, float16;
* ``intervention``: ``decode`` with an ``Intervention`` adding a vector at ``blocks.2.resid_post`` at every
  step on the masked positions.

Targets: traced <= 1.1x plain, intervention <= 1.2x plain.  Prints a table, exits 1 when a target is missed.
The targets are judged on the ratio of the fastest round of each (the round least disturbed by other
processes: on a shared machine a median moves by more than the 10% being measured); the medians' ratio is
printed beside it.  Compare the ratios within one run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_trajectory.py [--repeats 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from dlmlab.metrics.speed import interleaved_times
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.sampling import DecodeConfig, Intervention, decode, run_sampler_with_cache

TARGETS = {"traced": 1.1, "intervention": 1.2}
POINT = "blocks.2.resid_post"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    V = 512
    model = Transformer(TransformerConfig(vocab_size=V, d_model=256, n_layers=4, n_heads=8, d_mlp=1024,
                                          max_seq_len=128, attn_mask="bidirectional", positions="rope")).eval()
    mask = V - 1
    canvas = torch.randint(0, mask, (a.batch, 128), generator=torch.Generator().manual_seed(1))
    canvas[:, 32:] = mask
    cfg = DecodeConfig(steps=a.steps)
    push = [Intervention(POINT, torch.randn(256, generator=torch.Generator().manual_seed(2)), positions="masked")]

    def g():
        return torch.Generator().manual_seed(0)

    fns = {
        "plain": lambda: decode(model, canvas, 32, cfg, g(), mask_id=mask),
        "traced": lambda: run_sampler_with_cache(model, canvas, 32, cfg, g(), mask_id=mask, names_filter=[POINT]),
        "traced, masked f16": lambda: run_sampler_with_cache(model, canvas, 32, cfg, g(), mask_id=mask,
                                                             names_filter=[POINT], positions="masked",
                                                             dtype="float16"),
        "intervention": lambda: decode(model, canvas, 32, cfg, g(), mask_id=mask, interventions=push),
    }
    times = interleaved_times(fns, repeats=a.repeats, warmup=1)
    base, base_min = statistics.median(times["plain"]), min(times["plain"])
    failed = False
    print(f"| decode ({a.batch} x 128 positions, {a.steps} steps, {a.threads} thread(s), {a.repeats} rounds) "
          "| fastest s | ratio (fastest) | median s | ratio (median) | target |")
    print("|---|---|---|---|---|---|")
    for name, ts in times.items():
        fast, med = min(ts), statistics.median(ts)
        ratio = fast / base_min
        target = TARGETS.get(name)
        ok = target is None or ratio <= target
        failed |= not ok
        print(f"| {name} | {fast:.3f} | {ratio:.3f} | {med:.3f} | {med / base:.3f} | "
              f"{'' if target is None else f'<= {target}'}{'' if ok else ' MISSED'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
