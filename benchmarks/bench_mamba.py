"""Mamba train-step benchmark: dlmlab's pure-PyTorch Mamba vs mambapy (pscan) vs HF's CPU path.

One train step = forward (tokens -> logits), cross-entropy over ``n_out`` classes,
backward, AdamW update.  All models have the same shape (default: the state study's
4 layers, d_model 128, d_inner matched to the transformer's ~830K parameters,
d_state 16, d_conv 4) and run at batch 32 x length 128 in float32 on CPU.

    flock /tmp/dlmlab-cpu.lock .venv/bin/python benchmarks/bench_mamba.py
    .venv/bin/python benchmarks/bench_mamba.py --steps 3 --hf-steps 0 --chunks 8,16,32   # quick

Prints a table (median seconds per step, speed-up of ours over mambapy) and writes
JSON with ``--json PATH``.  HF's ``MambaForCausalLM`` without the CUDA kernels runs a
Python loop over time steps and is very slow; ``--hf-steps 0`` skips it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import torch
from torch import nn

from dlmlab.models.factory import build_model, count_params


def time_steps(model: nn.Module, forward: Callable, tokens, labels, n_out: int, steps: int, warmup: int) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        logits = forward(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, n_out), labels.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= warmup:
            out.append(time.perf_counter() - t0)
    return out


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


def hf_model(vocab: int, n_out: int, d_model: int, n_layers: int, d_inner: int, d_state: int, d_conv: int,
             use_mambapy: bool):
    import transformers

    cfg = transformers.MambaConfig(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=n_layers,
                                   state_size=d_state, conv_kernel=d_conv, expand=2,
                                   use_mambapy=use_mambapy, use_cache=False)
    cfg.intermediate_size = d_inner  # HF wants an integer expand; set the width exactly
    model = transformers.MambaModel(cfg)
    assert model.layers[0].mixer.intermediate_size == d_inner
    head = nn.Linear(d_model, n_out, bias=False)
    wrapper = nn.ModuleDict({"backbone": model, "head": head})
    return wrapper, lambda tokens: head(model(tokens).last_hidden_state)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8)
    ap.add_argument("--n-out", type=int, default=6)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--chunks", default="16", help="comma list of scan chunk sizes to time for ours")
    ap.add_argument("--hf-steps", type=int, default=1, help="steps of HF's sequential CPU path (0 skips)")
    ap.add_argument("--others", default="mamba2,transformer,lstm,gru",
                    help="other dlmlab architectures to time at the same shape, for context ('' skips)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    labels = torch.randint(0, args.n_out, (args.batch, args.seq), generator=g)
    shape = dict(vocab_size=args.vocab, n_out=args.n_out, d_model=args.d_model, n_layers=args.layers)
    ours0 = build_model("mamba", **shape)
    c = ours0.cfg
    dims = (args.vocab, args.n_out, args.d_model, args.layers, c.d_inner, c.d_state, c.d_conv)
    print(f"shape: B={args.batch} T={args.seq} d_model={args.d_model} layers={args.layers} d_inner={c.d_inner} "
          f"d_state={c.d_state}  threads={torch.get_num_threads()}  torch {torch.__version__}")
    rows: list[dict] = []

    def record(name, model, fwd, steps, warmup):
        ts = time_steps(model, fwd, tokens, labels, args.n_out, steps, warmup)
        rows.append({"impl": name, "params": count_params(model), "steps": steps,
                     "median_s": statistics.median(ts), "min_s": min(ts)})
        print(f"  {name:<34} {rows[-1]['median_s']:8.3f} s/step (min {rows[-1]['min_s']:.3f}, {steps} steps)",
              flush=True)

    for ch in [int(x) for x in args.chunks.split(",") if x]:
        torch.manual_seed(0)
        m = build_model("mamba", **shape, scan_chunk=ch)
        record(f"dlmlab mamba (chunk {ch})", m, m, args.steps, args.warmup)
    torch.manual_seed(0)
    mp = MambapyTagger(*dims)
    record("mambapy (pscan)", mp, mp, args.steps, args.warmup)
    if args.hf_steps > 0:
        torch.manual_seed(0)
        hf, fwd = hf_model(*dims, use_mambapy=False)
        record("HF MambaModel (sequential CPU)", hf, fwd, args.hf_steps, 0)
    for arch in [a for a in args.others.split(",") if a]:
        torch.manual_seed(0)
        m = build_model(arch, **shape)
        record(f"dlmlab {arch} (context)", m, m, args.steps, args.warmup)
    mp_t = next(r["median_s"] for r in rows if r["impl"].startswith("mambapy"))
    best = min((r for r in rows if r["impl"].startswith("dlmlab mamba (")), key=lambda r: r["median_s"])
    print()
    print(f"| implementation | params | s/step (median) | vs mambapy |")
    print(f"|---|---|---|---|")
    for r in rows:
        r["speedup_vs_mambapy"] = mp_t / r["median_s"]
        print(f"| {r['impl']} | {r['params']:,} | {r['median_s']:.3f} | {r['speedup_vs_mambapy']:.2f}x |")
    print(f"\nbest dlmlab / mambapy speed-up: {mp_t / best['median_s']:.2f}x  (target >= 2x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "threads": torch.get_num_threads(), "rows": rows}, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
