"""Single-model pilot of the induction study's cpu recipe: how many steps until a model learns induction.

    python scripts/induction_pilot.py --objective dlm --seed 0 --steps 18000 [--text-steps 0] [--every 1000]

Trains one depth-2 model of the cpu preset (the study's own model, objective and batches; ``--text-steps``
overrides the preset's text-only phase) and prints its forward induction accuracy on 128 fresh repeats every
``--every`` steps, then the first step at which it reached the learned level (90% of the way from chance to
perfect, ``report.claims.learned_level``).  No claim is computed.  docs/induction.md ("Budget") quotes the
pilots that set the cpu preset's curriculum and steps.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from dlmlab.report.claims import learned_level
from dlmlab.studies.induction import train as tr
from dlmlab.studies.induction.analyse import accuracy_fn, n_ids
from dlmlab.studies.induction.presets import PRESETS
from dlmlab.tasks.repeated import repeated_tokens
from dlmlab.training import train


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objective", choices=tr.OBJECTIVES, default="ar")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=PRESETS["cpu"].steps)
    ap.add_argument("--text-steps", type=int, default=PRESETS["cpu"].text_steps)
    ap.add_argument("--every", type=int, default=1000)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    p = dataclasses.replace(PRESETS["cpu"], seed=a.seed, steps=a.steps, text_steps=a.text_steps)
    p.validate()
    data = tr.load_data(p)
    ev = repeated_tokens(128, p.seq_len // 2, data.lo, data.hi, torch.Generator().manual_seed(1), distinct=True)
    so = tr.study_objective(p, data.vocab, a.objective)
    torch.manual_seed(p.seed)
    model = tr.Transformer(tr.model_config(p, data.vocab, 2, so))
    metric = accuracy_fn(so, ev, p.per_seq)
    level = learned_level(1.0 / n_ids(p, data.vocab))  # the study's chance level (analyse_model's "chance")

    def evaluate(m, step: int) -> dict:
        acc = float(metric(m))
        print(f"{a.objective} L2 seed {a.seed} text_steps {a.text_steps}: step {step} accuracy {acc:.3f}", flush=True)
        return {"acc": acc}

    cfg = dataclasses.replace(tr.train_config(p, False), eval_every=a.every)
    hist = train(model, cfg, tr.batch_fn(p, data), so.objective, eval_fn=evaluate)
    first = next((r["step"] for r in hist if r.get("eval_acc", 0.0) >= level), None)
    print(f"learned level {level:.3f} first reached at step {first}" if first else
          f"learned level {level:.3f} not reached in {a.steps} steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
