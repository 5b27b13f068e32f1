"""Run the first steps of each study's `paper` preset, to prove the GPU path end to end.

Each study runs its whole pipeline (training, analysis, claims, report) from its `paper` preset
with every training length capped at ``--steps`` (and warm-up / checkpoint / logging cadences capped
to fit), in its own process with a time limit, and the script prints one line per study: exit
status, wall time, device and the claims computed.  The claims of a capped run say nothing about the
study; what this checks is that the paper-scale code path runs on the device.

    python scripts/paper_first_steps.py --out runs/paper_first_steps --steps 50 [--study induction ...]

The PreDiff `paper` preset reads a local GPT-2 folder (``$DLMLAB_GPT2_DIR``) and WikiText-103
(``$DLMLAB_WIKITEXT103``); ``--random-gpt2`` writes a randomly initialised GPT-2 (124M shape, a BPE
tokenizer trained on the local WikiText-2 text) and points both variables at local files, for a
machine that has neither.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CADENCE_FIELDS = ("warmup_steps", "ckpt_every", "log_every", "curve_every", "eval_every")


def cap_steps(cfg, steps: int):
    """A copy of the dataclass ``cfg`` whose training lengths are at most ``steps`` (recursively)."""
    changes = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            changes[f.name] = cap_steps(v, steps)
        elif f.name.endswith("steps") and f.name not in CADENCE_FIELDS and isinstance(v, int) and not isinstance(v, bool):
            changes[f.name] = min(v, steps)
        elif f.name.endswith("steps") and isinstance(v, dict):
            changes[f.name] = {k: min(x, steps) if isinstance(x, int) else x for k, x in v.items()}
        elif f.name in CADENCE_FIELDS and isinstance(v, int) and not isinstance(v, bool) and v > 0:
            changes[f.name] = max(1, min(v, steps // 2))  # 0 means "never" and stays
    return dataclasses.replace(cfg, **changes)


def run_one(study: str, out: Path, steps: int) -> None:
    """In this process: cap the study's paper preset and run it into ``out``."""
    import importlib

    mod = importlib.import_module(f"dlmlab.studies.{study}")
    pm = importlib.import_module(f"dlmlab.studies.{study}.presets")
    presets = pm.PRESETS
    presets["paper"] = getattr(pm, "first_steps", cap_steps)(presets["paper"], steps)  # looked up by name
    mod.run("paper", out, progress=False)


def write_random_gpt2(folder: Path, text_file: Path) -> None:
    """A GPT-2 (124M shape) with random weights in Hugging Face format, tokenizer trained on ``text_file``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from dlmlab.data import BPETokenizer

    folder.mkdir(parents=True, exist_ok=True)
    tok = BPETokenizer.train(text_file.read_text(encoding="utf-8"), 8192)
    tok.save(folder / "tokenizer.json")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=tok.vocab_size)).save_pretrained(folder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--study", action="append", help="one study (repeatable); default all four")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per study")
    ap.add_argument("--random-gpt2", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        run_one(a.child, a.out / a.child, a.steps)
        return 0

    import torch

    from dlmlab.studies import STUDIES

    a.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if a.random_gpt2:
        from dlmlab.data.paths import data_root

        text = data_root() / "wikitext-2" / "valid.txt"
        write_random_gpt2(a.out / "gpt2-random", text)
        env.setdefault("DLMLAB_GPT2_DIR", str(a.out / "gpt2-random"))
        env.setdefault("DLMLAB_WIKITEXT103", str(text))
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    rows = []
    for study in a.study or list(STUDIES):
        t0 = time.perf_counter()
        log = a.out / f"{study}.log"
        with open(log, "w") as fh:
            try:
                rc = subprocess.run([sys.executable, __file__, "--out", str(a.out), "--steps", str(a.steps),
                                     "--child", study], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                    timeout=a.timeout).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        res = a.out / study / "results.json"
        claims = json.loads(res.read_text())["claims"] if res.exists() and rc == 0 else []
        rows.append({"study": study, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1), "device": device,
                     "claims": len(claims), "holding": sum(bool(c.get("holds")) for c in claims)})
        print(json.dumps(rows[-1]), flush=True)
        if rc != 0:
            print("".join(log.read_text().splitlines(keepends=True)[-15:]), flush=True)
    (a.out / "summary.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
