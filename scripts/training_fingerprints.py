"""Seeded fingerprints of every study's training path, to show that a refactor changes no number.

Each path runs at tiny size with fixed seeds through the entry point its study really uses, and is reduced to
its logged metric rows (every number, as ``repr`` of the float: bit-exact) and the sha256 of its final weights
(the state dict's tensors in sorted key order, name, dtype, shape and raw bytes)::

    PYTHONPATH=/path/to/old/src OMP_NUM_THREADS=1 .venv/bin/python scripts/training_fingerprints.py --out before.json
    OMP_NUM_THREADS=1 .venv/bin/python scripts/training_fingerprints.py --out after.json
    .venv/bin/python scripts/training_fingerprints.py --compare before.json after.json   # exit 1 on any difference

Paths: ``dlmlab train`` (:func:`dlmlab.training.lm.run_training`: AR, MDLM, MDLM under a log-linear and, on a
GRU, a cosine noise schedule); the induction study's AR and DLM (:func:`dlmlab.studies.induction.train.train_model`,
mask rates on a ``t_range``); the reversal study's synthetic kinds (:func:`~dlmlab.studies.reversal.synthetic.run_one`:
given-mask MDM, ARM, MDLM-trained MDM), its real-data ARM and MDM (:func:`~dlmlab.studies.reversal.real.fit_and_rank`,
pad-aware objectives) and its Hugging Face fine-tuning (:func:`~dlmlab.studies.reversal.hf_finetune.finetune`, a
tiny Qwen2 as AR and as Dream); the state study's cells of every family (the tagging objective,
:func:`~dlmlab.studies.state.cells.train_on_task`, one stopped early) and its small HF pretraining
(:func:`~dlmlab.studies.state.pretrain_small.pretrain_one`); the PreDiff study's AR pretraining and every adaptation
method (:func:`~dlmlab.studies.prediff.backbone.prepare`, :func:`~dlmlab.studies.prediff.adapt.adapt`), plus one
method under the ``mdlm_bound`` loss.  About two minutes on one thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch


# --- reduction to comparable data ------------------------------------------------------------------------------

def weights_sha256(state: dict | torch.nn.Module) -> str:
    """sha256 over the tensors of a state dict (or a module's) in sorted key order: name, dtype, shape, raw bytes."""
    sd = state.state_dict() if isinstance(state, torch.nn.Module) else state
    h = hashlib.sha256()
    for k in sorted(sd):
        t = sd[k].detach().cpu().contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def numbers(x):
    """Every number of ``x`` (nested dicts / lists), floats as ``repr`` (bit-exact); other leaves dropped."""
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, dict):
        return {str(k): numbers(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))
                if not isinstance(v, str)}
    if isinstance(x, (list, tuple)):
        return [numbers(v) for v in x]
    return None


def metrics_file(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(folder) / "metrics.jsonl").read_text().splitlines() if line.strip()]


def latest_weights(run: Path) -> dict:
    from safetensors.torch import load_file

    info = json.loads((run / "checkpoints" / "latest.json").read_text())
    return load_file(str(run / "checkpoints" / info["path"] / "model.safetensors"))


# --- the paths -------------------------------------------------------------------------------------------------

def lm_paths(tmp: Path) -> dict:
    """``dlmlab train``'s run_training: AR, MDLM (default / log-linear noise) on a transformer, MDLM cosine on a GRU."""
    from dlmlab.data import DataConfig
    from dlmlab.models import TransformerConfig
    from dlmlab.training import TrainConfig
    from dlmlab.training.lm import RunConfig, model_from_dict, run_training

    def tcfg():
        return TrainConfig(steps=12, batch_size=8, lr=3e-3, warmup_steps=2, log_every=3, eval_every=6, ckpt_every=6,
                           seed=3, progress=False)

    causal = TransformerConfig(d_model=32, n_layers=2, n_heads=2, d_mlp=64, max_seq_len=32)
    bidir = dataclasses.replace(causal, attn_mask="bidirectional")
    gru = model_from_dict({"family": "gru", "d_model": 32, "n_layers": 1})
    runs = {
        "lm_ar": dict(model=causal, objective="ar"),
        "lm_mdlm": dict(model=bidir, objective="mdlm"),
        "lm_mdlm_loglinear": dict(model=bidir, objective="mdlm", noise={"name": "loglinear", "eps": 0.01}),
        "lm_mdlm_cosine_gru": dict(model=gru, objective="mdlm", noise="cosine"),
    }
    out = {}
    for name, kw in runs.items():
        cfg = RunConfig(train=tcfg(), data=DataConfig(source="tinyshakespeare", seq_len=24), eval_batches=2, **kw)
        res = run_training(cfg, tmp / name, resume=False)
        out[name] = {"rows": numbers(res["history"]), "eval": numbers(res["eval"]),
                     "sha256": weights_sha256(latest_weights(tmp / name))}
    return out


def induction_paths(tmp: Path) -> dict:
    """The induction study's AR and DLM (mask rates on [0.02, 0.5]) with the text -> repeats curriculum."""
    from dlmlab.studies.induction.presets import PRESETS
    from dlmlab.studies.induction.train import load_data, train_model

    p = dataclasses.replace(PRESETS["smoke"], steps=16, text_steps=6, warmup_steps=2, batch_size=8, ckpt_every=8,
                            t_min=0.02, t_max=0.5, max_chars=20_000, seed=1)
    data = load_data(p)
    out = {}
    for objective in ("ar", "dlm"):
        model, hist = train_model(p, data, 2, objective, tmp / f"induction_{objective}", progress=False)
        out[f"induction_{objective}"] = {"rows": numbers(hist), "sha256": weights_sha256(model)}
    return out


def reversal_synthetic_paths(tmp: Path) -> dict:
    """The reversal study's forward-only kinds on the positional relation task (one PE each)."""
    from dlmlab.studies.reversal import synthetic
    from dlmlab.studies.reversal.presets import PRESETS, _constant

    p = dataclasses.replace(PRESETS["smoke"], train=_constant(12, 16, 4), seeds=[0])
    built = []
    original = synthetic.build_model

    def capture(*a, **kw):
        m = original(*a, **kw)
        built.append(m)
        return m

    synthetic.build_model = capture
    out = {}
    try:
        for kind, pe in (("mdm", "learned"), ("arm", "rope"), ("mdm_mdlm", "alibi")):
            res = synthetic.run_one(p, kind, pe, 0, progress=False)
            out[f"reversal_{kind}"] = {"rows": numbers(res["history"]), "diagnostics": numbers(res["diagnostics"]),
                                       "sha256": weights_sha256(built[-1])}
    finally:
        synthetic.build_model = original
    return out


def reversal_real_paths(tmp: Path) -> dict:
    """The reversal study's real-data ARM (pads ignored) and MDM (pads never masked), run folders with cards."""
    from dlmlab.models import Transformer, TransformerConfig
    from dlmlab.studies.reversal.presets import RealDataPreset
    from dlmlab.studies.reversal.real import fit_and_rank, prepare
    from dlmlab.training import TrainConfig

    cfg = RealDataPreset(enabled=True, n_facts=3, bpe_vocab=2048, seq_len=96,
                         model=TransformerConfig(d_model=32, n_layers=1, n_heads=2, d_mlp=64),
                         train=TrainConfig(steps=10, batch_size=8, lr=3e-3, warmup_steps=2, log_every=2))
    task = prepare(cfg)
    out = {}
    for kind in ("arm", "mdm"):
        mcfg = dataclasses.replace(cfg.model, vocab_size=task.vocab_size, positions="rope", max_seq_len=cfg.seq_len,
                                   attn_mask="bidirectional" if kind == "mdm" else "causal")
        torch.manual_seed(5)
        model = Transformer(mcfg)
        folder = tmp / f"real_{kind}"
        res = fit_and_rank(model, task, kind, cfg.train, cfg.seq_len, 5, False, out_dir=folder)
        out[f"reversal_real_{kind}"] = {"rows": numbers(metrics_file(folder)), "result": numbers(res),
                                        "sha256": weights_sha256(model)}
    return out


def _hf_tokenizer():
    from transformers import PreTrainedTokenizerFast

    from dlmlab.tasks.relations import load_person_description, train_relation_tokenizer

    texts = load_person_description("p2d_prompts_train").texts()[:90]
    bpe = train_relation_tokenizer(texts + load_person_description("p2d_reverse_prompts_test").texts()[:30], 400)
    bpe.tok.add_special_tokens(["[PAD]", "[EOS]", "[BOS]", "[MASK]"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe.tok, pad_token="[PAD]", eos_token="[EOS]", bos_token="[BOS]",
                                   mask_token="[MASK]")


def reversal_hf_paths(tmp: Path) -> dict:
    """The reversal study's Hugging Face fine-tuning: a tiny random Qwen2 as an AR model and as Dream (MDM)."""
    import transformers

    from dlmlab.studies.reversal import hf_finetune
    from dlmlab.training import TrainConfig

    tok = _hf_tokenizer()
    out = {}
    original = hf_finetune.load_model
    built = []

    def capture(*a, **kw):
        m, info = original(*a, **kw)
        built.append(m)
        return m, info

    hf_finetune.load_model = capture
    try:
        for fmt in ("qwen2", "dream"):
            folder = tmp / f"hf_{fmt}"
            torch.manual_seed(0)
            hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
                vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False))
            hf.save_pretrained(folder)
            if fmt == "dream":
                c = json.loads((folder / "config.json").read_text())
                c.update(model_type="Dream", architectures=["DreamModel"], mask_token_id=tok.mask_token_id)
                (folder / "config.json").write_text(json.dumps(c))
            tok.save_pretrained(folder)
            train = TrainConfig(steps=3, batch_size=4, lr=3e-3, log_every=1, weight_decay=0.0, progress=False)
            cfg = hf_finetune.HFFinetuneConfig(model_path=str(folder), n_facts=3, seq_len=96, n_signature_facts=3,
                                               train=train, eval_every=2)
            res = hf_finetune.finetune(cfg, tmp / f"hf_{fmt}_out", progress=False)
            out[f"reversal_hf_{fmt}"] = {"rows": numbers(metrics_file(tmp / f"hf_{fmt}_out")),
                                         "result": numbers({k: v for k, v in res.items() if k != "config"}),
                                         "sha256": weights_sha256(built[-1])}
    finally:
        hf_finetune.load_model = original
    return out


def state_paths(tmp: Path) -> dict:
    """The state study's cells (tagging objective) of every family on parity; one stopped once learned."""
    from dlmlab.studies.state.cells import build, check_set, make_task, train_on_task
    from dlmlab.studies.state.presets import PRESETS

    p = dataclasses.replace(PRESETS["smoke"], d_model=16, n_layers=1, batch_size=8, seed=2)
    task = make_task("parity", p)
    check = check_set(task, p)
    out = {}
    for arch, stop_at in (("transformer", None), ("mamba", None), ("mamba2", None), ("lstm", None), ("gru", None),
                          ("transformer", 0.0)):
        torch.manual_seed(p.seed)
        model = build(arch, task, p)
        rows = train_on_task(model, task, p, False, f"fp {arch}", steps=10, arch=arch, check=check, stop_at=stop_at)
        name = f"state_{arch}" + ("_stopped" if stop_at is not None else "")
        out[name] = {"rows": numbers(rows), "sha256": weights_sha256(model)}
    return out


def state_pretrain_paths(tmp: Path) -> dict:
    """The state study's small Hugging Face pretraining (next-byte AR on float32 logits)."""
    from dlmlab.studies.state.pretrain_small import RECIPES, byte_ids, pretrain_one

    r = dataclasses.replace(RECIPES["smoke"], steps=4, warmup_steps=1, max_chars=20_000, val_windows=2)
    ids = byte_ids(r.corpus, r.max_chars)
    out = {}
    for arch in ("gpt_neox", "mamba"):
        hf, rec = pretrain_one(arch, r, ids, 0, progress=False)
        out[f"state_pretrain_{arch}"] = {"rows": numbers({k: v for k, v in rec.items() if k != "train_cpu_s"}),
                                         "sha256": weights_sha256(hf)}
    return out


def prediff_paths(tmp: Path) -> dict:
    """The PreDiff study: AR pretraining of the backbone, then every adaptation method (and one under mdlm_bound)."""
    from dlmlab.prediff import METHODS
    from dlmlab.studies.prediff.adapt import adapt, run_dir
    from dlmlab.studies.prediff.backbone import prepare
    from dlmlab.studies.prediff.presets import PRESETS

    base = PRESETS["smoke"]
    p = dataclasses.replace(base, pretrain=dataclasses.replace(base.pretrain, steps=12, log_every=4),
                            adapt=dataclasses.replace(base.adapt, steps=6, log_every=2, warmup_steps=1),
                            curve_every=3, curve_windows=4, seeds=[0])
    out = {}
    backbone, tokenizer, stream, info = prepare(p, tmp / "prediff", progress=False)
    out["prediff_pretrain"] = {"rows": numbers(metrics_file(tmp / "prediff" / "runs" / "pretrain")),
                               "sha256": weights_sha256(backbone)}
    runs = [(m, p, "") for m in METHODS] + [("prediff", dataclasses.replace(p, loss="mdlm_bound"), "_mdlm_bound")]
    for method, pp, suffix in runs:
        folder = tmp / f"prediff{suffix}"
        model, curve = adapt(method, backbone, stream, pp, folder, progress=False, seed=1)
        out[f"prediff_{method}{suffix}"] = {"rows": numbers(metrics_file(run_dir(folder, method, 1))),
                                            "curve": numbers(curve), "sha256": weights_sha256(model)}
    return out


GROUPS = {"lm": lm_paths, "induction": induction_paths, "reversal_synthetic": reversal_synthetic_paths,
          "reversal_real": reversal_real_paths, "reversal_hf": reversal_hf_paths, "state": state_paths,
          "state_pretrain": state_pretrain_paths, "prediff": prediff_paths}


def run(groups: list[str]) -> dict:
    import dlmlab

    torch.set_num_threads(1)
    result = {"dlmlab": str(Path(dlmlab.__file__).resolve().parent), "torch": torch.__version__, "paths": {},
              "errors": {}, "seconds": {}}
    with tempfile.TemporaryDirectory(prefix="fingerprints-") as d:
        for g in groups:
            t0 = time.perf_counter()
            try:
                result["paths"].update(GROUPS[g](Path(d) / g))
            except Exception:  # noqa: BLE001 - recorded, and the run exits non-zero
                result["errors"][g] = traceback.format_exc()
                print(result["errors"][g], file=sys.stderr)
            result["seconds"][g] = round(time.perf_counter() - t0, 1)
            print(f"{g}: {result['seconds'][g]} s", file=sys.stderr)
    return result


def compare(a: dict, b: dict) -> list[str]:
    """Lines naming every path whose fingerprint differs (or is missing on one side)."""
    diffs = []
    for name in sorted(set(a["paths"]) | set(b["paths"])):
        x, y = a["paths"].get(name), b["paths"].get(name)
        if x is None or y is None:
            diffs.append(f"{name}: only in {'the second' if x is None else 'the first'}")
            continue
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                diffs.append(f"{name}.{key}: differs")
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the fingerprints here (JSON)")
    ap.add_argument("--only", nargs="*", choices=sorted(GROUPS), help="run only these groups")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two fingerprint files")
    a = ap.parse_args(argv)
    if a.compare:
        x, y = (json.loads(Path(f).read_text()) for f in a.compare)
        diffs = compare(x, y)
        n = len(set(x["paths"]) | set(y["paths"]))
        print("\n".join(diffs) if diffs else f"all {n} paths bit-identical (losses, metrics and weight hashes)")
        return 1 if diffs or x["errors"] or y["errors"] else 0
    t0 = time.perf_counter()
    res = run(a.only or list(GROUPS))
    res["total_seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(res, indent=1, sort_keys=True)
    if a.out:
        Path(a.out).write_text(text + "\n")
    else:
        print(text)
    print(f"{len(res['paths'])} paths in {res['total_seconds']} s from {res['dlmlab']}; errors: {sorted(res['errors'])}",
          file=sys.stderr)
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
