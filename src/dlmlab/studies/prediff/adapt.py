"""Adapt the backbone with one method under the shared budget; record the held-out PPL curve."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import torch

from dlmlab.data import TokenStream
from dlmlab.metrics import ar_nll_per_window
from dlmlab.models import Transformer
from dlmlab.prediff import METHODS, PreDiffLM, eval_nelbo_per_window, eval_original_weighting, make_task
from dlmlab.studies.prediff.presets import PreDiffPreset
from dlmlab.training import train


def build(method: str, backbone: Transformer, seed: int = 0, mask_init: str = "random") -> torch.nn.Module:
    """The model a method trains: the AR backbone itself (ar_control) or a PreDiffLM around a copy / a fresh init."""
    m = METHODS[method]
    bb = copy.deepcopy(backbone)
    if m.init == "scratch":
        torch.manual_seed(seed)
        bb = Transformer(bb.cfg).to(backbone.tok_emb.weight.device)
    if not m.is_diffusion:
        return bb
    torch.manual_seed(seed)
    return PreDiffLM(bb, attention=m.final_attention, shift=m.shift, mask_init=mask_init).to(backbone.tok_emb.weight.device)


def held_out_nll(method: str, model, windows: torch.Tensor, prompt_len: int, n_t: int, seed: int = 0) -> torch.Tensor:
    """nats / target token per window [N]: exact for AR, the MDLM ELBO bound for diffusion methods.

    Diffusion draws depend only on ``seed``: every method sees the same times and masks (paired).
    """
    if METHODS[method].is_diffusion:
        return eval_nelbo_per_window(model, windows, prompt_len, n_t=n_t, seed=seed)
    return ar_nll_per_window(model, windows, prompt_len)


def unigram_nll(train_ids: torch.Tensor, windows: torch.Tensor, prompt_len: int, vocab: int) -> float:
    """nats / target token of the context-free predictor: the training stream's unigram frequencies (add-one
    smoothed over ``vocab`` ids) scored on the target tokens (after ``prompt_len``) of ``windows`` [N, T]."""
    counts = torch.bincount(train_ids.flatten().cpu(), minlength=vocab).double() + 1.0
    logp = (counts / counts.sum()).log()
    return float(-logp[windows[:, prompt_len:].flatten().cpu()].mean())


def original_weighting_nll(method: str, model, windows: torch.Tensor, p: PreDiffPreset) -> float | None:
    """The study code's 1/(1-t)-weighted number (not a bound) for diffusion methods; None for AR."""
    if not METHODS[method].is_diffusion:
        return None
    return eval_original_weighting(model, windows, p.prompt_len, n_t=p.original_eval_n_t, seed=1)


def adapt(method: str, backbone: Transformer, stream: TokenStream, p: PreDiffPreset, out: Path,
          progress: bool = True, seed: int = 0) -> tuple[torch.nn.Module, list[dict]]:
    """Train ``method`` (training seed ``seed``) for ``p.adapt.steps``; returns (model, curve rows {step, ppl}) from step 0."""
    m = METHODS[method]
    model = build(method, backbone, seed=seed, mask_init=p.mask_init)
    lr = p.scratch_lr if m.init == "scratch" else p.adapt.lr
    cfg = dataclasses.replace(p.adapt, lr=lr, seed=seed, eval_every=p.curve_every, progress=p.adapt.progress and progress)
    curve_x = TokenStream.chunks(stream.val, p.seq_len, limit=p.curve_windows).to(p.device)

    def curve(mdl, step: int) -> dict:
        nll = held_out_nll(method, mdl, curve_x, p.prompt_len, p.curve_n_t).mean().item()
        return {"ppl": math.exp(nll)}

    rows = [{"step": 0, "ppl": curve(model, 0)["ppl"]}]
    batches, objective = make_task(m, stream.train, p.seq_len, cfg.batch_size, cfg.steps,
                                   prompt_frac=p.prompt_frac, loss=p.loss)
    history = train(model, cfg, batches, objective, out_dir=run_dir(out, method, seed), eval_fn=curve,
                    desc=f"{method} s{seed}")  # a PreDiffLM (no model family) writes no model.json
    rows += [{"step": r["step"], "ppl": r["eval_ppl"]} for r in history if "eval_ppl" in r]
    model.eval()
    return model, rows


def run_dir(out: Path, method: str, seed: int) -> Path:
    return out / "runs" / f"{method}-seed{seed}"
