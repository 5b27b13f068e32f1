"""Mamba train-step benchmark: dlmlab's Mamba-1 and Mamba-2 (fused C++ scans) vs the matched Transformer and mambapy.

One train step = forward (tokens -> logits), cross-entropy over ``n_out`` classes,
backward, AdamW update.  All models are parameter-matched at the state study's shape
(4 layers, d_model 128, ~830K parameters; Mamba: d_inner 454, d_state 16, d_conv 4;
Mamba-2: d_inner 480 = 15 heads x 32, d_state 64, one B/C group, d_conv 4) and run at batch
32 x length 128 in float32 on CPU.

Steps are interleaved (one step of every model per round, ``--repeats`` rounds after one
warm-up round), so a changing load on the machine hits all models alike; the table reports
medians and the targets are ratios within this one run:

* Mamba-1 (``scan="fused"``) step <= 2x the matched Transformer's step;
* Mamba-1 (``scan="fused"``) >= 15x faster than mambapy (``pscan``);
* Mamba-2 (``scan="fused"``) step <= 2x the matched Transformer's step.

Exits with status 1 when a target is missed.

    flock /tmp/dlmlab-cpu.lock .venv/bin/python benchmarks/bench_mamba.py
    .venv/bin/python benchmarks/bench_mamba.py --repeats 3 --others '' --scans fused   # quick

``--scans`` adds the pure-PyTorch scans (``chunked``, ``sequential``) for comparison,
``--mamba2-scans`` the same for Mamba-2 (``chunked``: the pure-PyTorch SSD; ``''`` skips Mamba-2);
``--others`` other architectures for context; ``--hf-steps N`` HF's ``MambaModel`` CPU path
(a Python loop over time; very slow).  ``--json PATH`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable

import torch
from torch import nn

from dlmlab.models.factory import build_model, count_params

MAX_VS_TRANSFORMER = 2.0  # Mamba-1 step / Transformer step
MIN_VS_MAMBAPY = 15.0  # mambapy step / Mamba-1 step
MAX_MAMBA2_VS_TRANSFORMER = 2.0  # Mamba-2 step / Transformer step


class Stepper:
    """One model with its optimiser; ``step()`` runs and times one train step (seconds)."""

    def __init__(self, name: str, model: nn.Module, forward: Callable, n_out: int) -> None:
        self.name, self.model, self.forward, self.n_out = name, model, forward, n_out
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        self.times: list[float] = []

    def step(self, tokens: torch.Tensor, labels: torch.Tensor) -> float:
        t0 = time.perf_counter()
        logits = self.forward(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, self.n_out), labels.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return time.perf_counter() - t0

    @property
    def median(self) -> float:
        return statistics.median(self.times)


class MambapyTagger(nn.Module):
    """Embedding -> mambapy.Mamba (pscan) -> RMSNorm -> head, the same shape as ours."""

    def __init__(self, vocab: int, n_out: int, d_model: int, n_layers: int, d_inner: int, d_state: int, d_conv: int):
        super().__init__()
        from mambapy.mamba import Mamba, MambaConfig, RMSNorm

        cfg = MambaConfig(d_model=d_model, n_layers=n_layers, d_state=d_state, d_conv=d_conv, pscan=True)
        cfg.d_inner = d_inner  # mambapy derives it from an integer expand factor; set it exactly
        self.emb = nn.Embedding(vocab, d_model)
        self.body = Mamba(cfg)
        self.norm = RMSNorm(d_model)
        self.head = nn.Linear(d_model, n_out, bias=False)

    def forward(self, tokens):
        return self.head(self.norm(self.body(self.emb(tokens))))


def hf_model(vocab: int, n_out: int, d_model: int, n_layers: int, d_inner: int, d_state: int, d_conv: int):
    """HF ``MambaModel`` (its CPU path without the CUDA kernels) + a linear head."""
    import transformers

    cfg = transformers.MambaConfig(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers,
                                   state_size=d_state, conv_kernel=d_conv, expand=2,
                                   use_mambapy=False, use_cache=False)
    cfg.intermediate_size = d_inner  # HF wants an integer expand; set the width exactly
    model = transformers.MambaModel(cfg)
    assert model.layers[0].mixer.intermediate_size == d_inner
    head = nn.Linear(d_model, n_out, bias=False)
    wrapper = nn.ModuleDict({"backbone": model, "head": head})
    return wrapper, lambda tokens: head(model(tokens).last_hidden_state)


def run_interleaved(steppers: list[Stepper], tokens, labels, repeats: int) -> None:
    """One warm-up round, then ``repeats`` rounds of one step per model (times kept)."""
    for s in steppers:
        s.step(tokens, labels)
    for _ in range(repeats):
        for s in steppers:
            s.times.append(s.step(tokens, labels))


def build_steppers(args, shape: dict) -> list[Stepper]:
    steppers = []
    for scan in [x for x in args.scans.split(",") if x]:
        torch.manual_seed(0)
        m = build_model("mamba", **shape, scan=scan, scan_chunk=args.chunk)
        steppers.append(Stepper(f"mamba ({scan} scan)", m, m, args.n_out))
    torch.manual_seed(0)
    m = build_model("transformer", **shape)
    steppers.append(Stepper("transformer", m, m, args.n_out))
    for scan in [x for x in args.mamba2_scans.split(",") if x]:
        torch.manual_seed(0)
        m = build_model("mamba2", **shape, scan=scan)
        steppers.append(Stepper(f"mamba2 ({scan} scan)", m, m, args.n_out))
    c = steppers[0].model.cfg
    dims = (args.vocab, args.n_out, args.d_model, args.layers, c.d_inner, c.d_state, c.d_conv)
    if args.mambapy:
        torch.manual_seed(0)
        mp = MambapyTagger(*dims)
        steppers.append(Stepper("mambapy (pscan)", mp, mp, args.n_out))
    for arch in [a for a in args.others.split(",") if a]:
        torch.manual_seed(0)
        m = build_model(arch, **shape)
        steppers.append(Stepper(arch, m, m, args.n_out))
    return steppers


def report(steppers: list[Stepper], hf: dict | None) -> tuple[list[dict], list[tuple[str, float, str, bool]]]:
    """Print the table and the targets; returns (rows, [(target, value, bound, met)])."""
    by = {s.name: s for s in steppers}
    ours = steppers[0]
    tf = by["transformer"].median
    mp = by["mambapy (pscan)"].median if "mambapy (pscan)" in by else None
    rows = [{"impl": s.name, "params": count_params(s.model), "steps": len(s.times), "median_s": s.median,
             "min_s": min(s.times), "vs_transformer": s.median / tf,
             "mambapy_speedup": (mp / s.median) if mp else None} for s in steppers]
    if hf:
        rows.append(hf)
    print("\n| model | params | s/step (median) | min | / transformer | mambapy / this |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        sp = f"{r['mambapy_speedup']:.1f}x" if r.get("mambapy_speedup") else "-"
        vt = f"{r['vs_transformer']:.2f}x" if r.get("vs_transformer") else "-"
        print(f"| {r['impl']} | {r['params']:,} | {r['median_s']:.3f} | {r['min_s']:.3f} | {vt} | {sp} |")
    targets = [(f"{ours.name} / transformer", ours.median / tf, f"<= {MAX_VS_TRANSFORMER:g}",
                ours.median / tf <= MAX_VS_TRANSFORMER)]
    m2 = next((s for s in steppers if s.name.startswith("mamba2 (")), None)  # the first --mamba2-scans entry
    if m2:
        targets.append((f"{m2.name} / transformer", m2.median / tf, f"<= {MAX_MAMBA2_VS_TRANSFORMER:g}",
                        m2.median / tf <= MAX_MAMBA2_VS_TRANSFORMER))
    if mp:
        targets.append((f"mambapy / {ours.name}", mp / ours.median, f">= {MIN_VS_MAMBAPY:g}",
                        mp / ours.median >= MIN_VS_MAMBAPY))
    print()
    for name, value, bound, met in targets:
        print(f"target: {name} = {value:.2f}x (want {bound}x): {'met' if met else 'MISSED'}")
    return rows, targets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8)
    ap.add_argument("--n-out", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=7, help="interleaved timed rounds (median over them)")
    ap.add_argument("--scans", default="fused", help="comma list of Mamba scans; the first is held to the targets")
    ap.add_argument("--chunk", type=int, default=16, help="scan_chunk (checkpoint interval of the fused scan)")
    ap.add_argument("--mamba2-scans", default="fused",
                    help="comma list of Mamba-2 scans; the first is held to its target ('' skips Mamba-2)")
    ap.add_argument("--no-mambapy", dest="mambapy", action="store_false", help="skip mambapy (and its target)")
    ap.add_argument("--others", default="", help="other dlmlab architectures for context, e.g. lstm,gru")
    ap.add_argument("--hf-steps", type=int, default=0, help="steps of HF's sequential CPU path (0 skips)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    labels = torch.randint(0, args.n_out, (args.batch, args.seq), generator=g)
    shape = dict(vocab_size=args.vocab, n_out=args.n_out, d_model=args.d_model, n_layers=args.layers)
    steppers = build_steppers(args, shape)
    c = steppers[0].model.cfg
    m2 = next((s.model.cfg for s in steppers if s.name.startswith("mamba2 (")), None)
    m2_shape = f" mamba2: d_inner={m2.d_inner} heads={m2.n_heads} d_state={m2.d_state}" if m2 else ""
    print(f"shape: B={args.batch} T={args.seq} d_model={args.d_model} layers={args.layers} d_inner={c.d_inner} "
          f"d_state={c.d_state}{m2_shape}  threads={torch.get_num_threads()}  torch {torch.__version__}  "
          f"{args.repeats} interleaved rounds", flush=True)
    run_interleaved(steppers, tokens, labels, args.repeats)
    hf = None
    if args.hf_steps > 0:
        torch.manual_seed(0)
        model, fwd = hf_model(args.vocab, args.n_out, args.d_model, args.layers, c.d_inner, c.d_state, c.d_conv)
        s = Stepper("HF MambaModel (sequential CPU)", model, fwd, args.n_out)
        s.times = [s.step(tokens, labels) for _ in range(args.hf_steps)]
        hf = {"impl": s.name, "params": count_params(model), "steps": len(s.times), "median_s": s.median,
              "min_s": min(s.times)}
    rows, targets = report(steppers, hf)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "threads": torch.get_num_threads(), "rows": rows,
                       "targets": [{"name": n, "value": v, "want": b, "met": m} for n, v, b, m in targets]},
                      f, indent=2)
    return 0 if all(met for *_, met in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
