"""Standard error of the Monte Carlo loglikelihood vs forwards: LLaDA's estimator and dlmlab's, same requests.

A small character-level masked-diffusion Transformer (d_model 64, 2 layers, 64 positions) is trained on Tiny
Shakespeare (about a minute on 2 CPU cores; cached under ``--work`` by a hash of its settings).  Requests are
held-out passages (the last 10% of the text): a 32-character prompt and a continuation of L characters, 8
requests for each L.  Each estimator scores every request ``--repeats`` times with independent seeds; the
table gives, per L and estimator, the forwards per request and the root mean square over requests of the
empirical standard deviation of the estimate (nats), and the mean reported standard error over the
empirical one (calibration, 1 = honest).

Target: for every L, dlmlab's estimator with at most 32 forwards reaches (<=) the empirical standard error of
LLaDA's estimator with 128 samples.  Prints the table; exits 1 when the target is missed.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_lmeval_mc.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path

import torch
from tqdm import tqdm

import dlmlab
from dlmlab.data.paths import resolve_text
from dlmlab.lmeval.scoring import DiffusionScorer
from dlmlab.sampling import as_denoiser

MODEL = {"objective": "mdlm",
         "model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_mlp": 256, "positions": "rope",
                   "attn_mask": "bidirectional", "max_seq_len": 64},
         "data": {"source": "tinyshakespeare", "tokenizer": "char", "seq_len": 64},
         "train": {"steps": 400, "batch_size": 32, "lr": 3.0e-3, "warmup_steps": 20, "log_every": 100,
                   "eval_every": 400, "ckpt_every": 400, "progress": False}}
PROMPT = 32
LENGTHS = (4, 16, 32)
PER_LENGTH = 8
# (estimator, mc_num): LLaDA's at several sample counts (its batches of 32 rows), dlmlab's at 8-32 forwards
SETTINGS = [("llada", 16), ("llada", 32), ("llada", 64), ("llada", 128), ("dlmlab", 8), ("dlmlab", 16), ("dlmlab", 32)]
TARGET = (("dlmlab", 32), ("llada", 128))


def trained_run(work: Path) -> Path:
    """The benchmark's model, trained once per settings (``dlmlab train`` into ``work/<hash>``)."""
    from dlmlab.cli.main import main as cli

    key = hashlib.sha256(json.dumps(MODEL, sort_keys=True).encode()).hexdigest()[:12]
    out = work / key
    if not (out / "checkpoints").is_dir() or not any((out / "checkpoints").iterdir()):
        out.mkdir(parents=True, exist_ok=True)
        cfg = out.with_suffix(".json")
        cfg.write_text(json.dumps(MODEL))
        if cli(["train", str(cfg), "--out", str(out)]) != 0:
            raise SystemExit("training the benchmark model failed")
    return out


def requests(tok) -> dict[int, list[tuple[list[int], list[int]]]]:
    text = resolve_text("tinyshakespeare").read_text(encoding="utf-8")
    held = text[int(len(text) * 0.9):]
    out = {}
    for L in LENGTHS:
        step = (len(held) - PROMPT - L) // PER_LENGTH
        out[L] = []
        for k in range(PER_LENGTH):
            ids = tok.encode(held[k * step + 7 * L: k * step + 7 * L + PROMPT + L])
            out[L].append((ids[:PROMPT], ids[PROMPT:]))
    return out


def measure(den, mask_id, reqs, method: str, K: int, repeats: int) -> dict:
    vals, ses, rows = [], [], []
    for seed in range(repeats):
        sc = DiffusionScorer(den, mask_id, method, K, batch_size=128, seed=seed, llada_batch=32)
        res = sc.score(reqs)
        vals.append([r[0] for r in res])
        ses.append([r[1] for r in res])
        rows.append(max(r[2] for r in res))
    v, s = torch.tensor(vals, dtype=torch.float64), torch.tensor(ses, dtype=torch.float64)
    sd = v.std(0)  # per request, over repeats
    return {"forwards": max(rows), "sd": float(sd.pow(2).mean().sqrt()),
            "calibration": float((s.mean(0) / sd.clamp(min=1e-12)).mean()) if float(sd.max()) > 0 else 1.0,
            "mean": v.mean(0).tolist()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="runs/bench_lmeval_mc", help="where the model is trained / cached")
    ap.add_argument("--repeats", type=int, default=30, help="independent estimates per request and setting")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    run = dlmlab.load(trained_run(Path(args.work)))
    den = as_denoiser(run.model, run.mask_id, run.shift_logits)
    reqs = requests(run.tokenizer)
    table = {}
    for L in LENGTHS:
        for method, K in tqdm(SETTINGS, desc=f"L={L}"):
            table[(L, method, K)] = measure(den, run.mask_id, reqs[L], method, K, args.repeats)
    print(f"MC loglikelihood of {PER_LENGTH} held-out continuations per length after a {PROMPT}-token prompt, "
          f"{args.repeats} repeats (char MDLM, {run.source})\n")
    print("| L | estimator | mc_num | forwards / request | empirical SE (nats, RMS over requests) | reported SE / empirical |")
    print("|--:|---|--:|--:|--:|--:|")
    for (L, method, K), r in table.items():
        print(f"| {L} | {method} | {K} | {r['forwards']} | {r['sd']:.4f} | {r['calibration']:.2f} |")
    ok = True
    print()
    for L in LENGTHS:
        ours, base = table[(L, *TARGET[0])], table[(L, *TARGET[1])]
        hit = ours["sd"] <= base["sd"] and ours["forwards"] <= 32
        ok &= hit
        print(f"L={L}: dlmlab {ours['forwards']} forwards SE {ours['sd']:.4f} vs LLaDA 128 samples SE {base['sd']:.4f}: "
              f"{'met' if hit else 'MISSED'} (ratio {ours['sd'] / base['sd'] if base['sd'] else math.nan:.2f})")
    print("target met" if ok else "target MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
