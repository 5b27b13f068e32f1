"""Training-step time of the study models, an older checkout of dlmlab against this one (issue 28: no host
sync per step).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_step_time.py --before /path/to/old/src [--repeats 3]

Each repeat runs one worker process per source tree (``PYTHONPATH`` set to it), in alternating order, and each
worker trains every workload through its study's own entry point at small size, single-threaded:
the induction study's DLM and AR (:func:`~dlmlab.studies.induction.train.train_model`), the reversal study's
given-mask MDM and MDLM-trained MDM (its model, batches and objective:
:func:`~dlmlab.studies.reversal.synthetic.make_objective`, through ``train``), a state cell (a Mamba on parity,
:func:`~dlmlab.studies.state.cells.train_on_task`) and two PreDiff methods (hybrid, annealed; their model and
:func:`~dlmlab.prediff.make_task` on a random-token stream, through ``train``).  A step's time is the interval between two consecutive optimizer
steps (the whole step: batch, objective, forward, backward, clipping, AdamW, the loop's bookkeeping); a
workload's time is the median over its steps, so setup and the occasional evaluation do not count.

Time is this process's CPU time (``time.process_time``; the workers run single-threaded), so a shared, loaded
machine slows both trees' wall clocks without skewing the comparison.  The table gives, per workload, the median
step time of each tree and the ratio after / before per repeat.
Exit status 1 when a workload is slower after than before beyond the noise: its median ratio is above
``1 + --tolerance`` (default 0.10) and every repeat's ratio is above 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = 40


def _timed(fn) -> float:
    """Median CPU-time interval (s) between consecutive optimizer steps while ``fn()`` runs."""
    import torch

    stamps: list[float] = []
    original = torch.optim.AdamW.step

    def step(self, *a, **kw):
        out = original(self, *a, **kw)
        stamps.append(time.process_time())
        return out

    torch.optim.AdamW.step = step
    try:
        fn()
    finally:
        torch.optim.AdamW.step = original
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return statistics.median(gaps)


def worker(out: Path) -> None:
    import torch

    torch.set_num_threads(1)
    res: dict[str, float] = {}

    from dlmlab.training import TrainConfig, train

    def cfg(steps=STEPS, batch=16):
        return TrainConfig(steps=steps, batch_size=batch, lr=1e-3, warmup_steps=2, log_every=10, progress=False)

    from dlmlab.studies.induction.presets import PRESETS as IND
    from dlmlab.studies.induction.train import load_data, train_model

    p = dataclasses.replace(IND["smoke"], steps=STEPS, text_steps=10, warmup_steps=2, batch_size=16, ckpt_every=0,
                            d_model=64, n_heads=4, seq_len=64, min_half=16, n_random=64, t_min=0.02, t_max=0.5,
                            max_chars=20_000)
    data = load_data(p)
    for objective in ("dlm", "ar"):
        res[f"induction {objective} L2"] = _timed(lambda: train_model(p, data, 2, objective, None, progress=False))

    # the study's model, batches and objective (make_objective: (batches, objective) now, (make_batch, loss_fn) in
    # older checkouts; train() takes either pair positionally), without the study's evaluations
    from dlmlab.studies.reversal.presets import PRESETS as REV
    from dlmlab.studies.reversal.synthetic import build_model, make_objective
    from dlmlab.tasks.positional_relations import PositionalRelations

    task = PositionalRelations(REV["smoke"].task, 0)
    for kind in ("mdm", "mdm_mdlm"):
        model = build_model(REV["smoke"], task, kind, "rope", 0)
        res[f"reversal {kind}"] = _timed(lambda: train(model, cfg(batch=64), *make_objective(task, kind, 64)))

    from dlmlab.studies.state.cells import build, make_task, train_on_task
    from dlmlab.studies.state.presets import PRESETS as ST

    sp = dataclasses.replace(ST["smoke"], d_model=64, n_layers=2, batch_size=16)
    st = make_task("parity", sp)
    torch.manual_seed(0)
    cell = build("mamba", st, sp)
    res["state mamba / parity"] = _timed(lambda: train_on_task(cell, st, sp, False, "bench", steps=STEPS,
                                                               arch="mamba"))

    from dlmlab.models import Transformer
    from dlmlab.prediff import METHODS
    from dlmlab.prediff import make_task as prediff_task
    from dlmlab.studies.prediff.adapt import build as prediff_build
    from dlmlab.studies.prediff.presets import PRESETS as PD

    pd = PD["smoke"]
    torch.manual_seed(0)
    backbone = Transformer(dataclasses.replace(pd.model, vocab_size=384, attn_mask="causal"))
    stream = torch.randint(0, 384, (20_000,), generator=torch.Generator().manual_seed(0))
    for method in ("prediff", "diffugpt"):
        model = prediff_build(method, backbone)
        res[f"prediff {method}"] = _timed(lambda: train(model, cfg(), *prediff_task(METHODS[method], stream,
                                                                                    pd.seq_len, 16, STEPS)))
    out.write_text(json.dumps(res))


def run_tree(src: str, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    subprocess.run([sys.executable, __file__, "--worker", str(out)], env=env, check=True)
    return json.loads(out.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="the src folder of the older checkout")
    ap.add_argument("--after", default=str(Path(__file__).resolve().parents[1] / "src"),
                    help="the src folder of the checkout to compare (default: this one)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(Path(a.worker))
        return 0
    if not a.before:
        ap.error("--before SRC is needed")
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.repeats):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                t0 = time.perf_counter()
                runs[which].append(run_tree(getattr(a, which), Path(d) / f"{which}{r}.json"))
                print(f"repeat {r + 1}/{a.repeats} {which}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    names = list(runs["before"][0])
    print(f"step time (median CPU ms per optimizer step, {STEPS} steps, 1 thread); before = {a.before}, "
          f"after = {a.after}\n")
    print(f"| workload | before ms | after ms | after / before per repeat | median ratio |")
    print("|---|---|---|---|---|")
    failed = []
    for n in names:
        b = [x[n] for x in runs["before"]]
        f = [x[n] for x in runs["after"]]
        ratios = [y / x for x, y in zip(b, f)]
        med = statistics.median(ratios)
        print(f"| {n} | {1e3 * statistics.median(b):.2f} | {1e3 * statistics.median(f):.2f} | "
              f"{', '.join(f'{x:.3f}' for x in ratios)} | {med:.3f} |")
        if med > 1 + a.tolerance and min(ratios) > 1:
            failed.append(n)
    if failed:
        print(f"\nslower after than before beyond the noise (median ratio > {1 + a.tolerance:.2f} in every repeat "
              f"above 1): {', '.join(failed)}")
        return 1
    print(f"\nno workload slower beyond the noise (median ratio <= {1 + a.tolerance:.2f}, or a repeat at or below 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
