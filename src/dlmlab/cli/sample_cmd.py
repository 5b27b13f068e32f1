"""dlmlab sample RUN_OR_CHECKPOINT: sampling from a model loaded by :func:`dlmlab.load`.

Objective mdlm (a ``dlmlab train`` / ``train()`` run or one of its checkpoints, any family, or a Hugging
Face LLaDA / Dream folder): masked-diffusion decoding; its mask id and logit alignment (``shift_logits``,
Dream) come with it.  KV reuse across steps (``--kv-reuse``) defaults to ``none`` (exact); approximate reuse
happens only when asked for, and every output row (and ``--html`` page) names it and whether it was exact.
``--unmask-rule`` (was ``--schedule``) and ``--kv-reuse`` (was ``--cache``): the old flags are refused
with a one-line error naming the new one.

The ``ancestral`` rule follows the noise schedule the model was trained with (``Loaded.noise``, the
schedule object with its fields), or the one ``--noise NAME`` names (default fields).

Objective ar (any family): left-to-right sampling with :func:`~dlmlab.sampling.ar.sample_ar`, KV-cached
when the model takes a cache (a toolkit Transformer), else re-running the prefix.

A sampled id the tokenizer cannot decode (a model vocabulary with reserved ids above the tokenizer's) is
shown as ``[id N]`` in the text; the JSONL rows keep the raw ids (``filled_ids`` / ``generated_ids``).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

import torch

from dlmlab.errors import UserError
from dlmlab.files import atomic_write_text, strict_json
from dlmlab.objectives.schedule import NoiseSchedule
from dlmlab.sampling import DecodeConfig, ModelDenoiser, decode

EPILOG = """\
RUN_OR_CHECKPOINT: anything dlmlab.load loads (a run folder, one of its checkpoints, a Hugging Face
folder); --step N picks checkpoint N of a run folder.
Masked-diffusion (mdlm) models: the mask id is the model's (the last vocabulary id of a dlmlab mdlm run).
Infilling: --infill "text with [MASK:n] spans" (n masked tokens; [MASK] is one).  Without --prompt,
--prompt-file or --infill the samples are unconditional.  --kv-reuse (only toolkit Transformers take it):
the default none is exact, and so is any reuse with block_causal attention; prompt / prefix / dual on a
fully bidirectional model are approximate (see docs/sampling.md).  Every JSONL row names its kv_reuse and
exactness.  --html PAGE.html writes the denoising trajectory as a self-contained page (step slider,
the positions committed at each step, their confidence, the text so far).
AR models (objective ar, any family): --prompt or --prompt-file is needed; KV-cached when the model
takes a cache; --temperature and --top-p apply, the diffusion options do not.

examples:
  dlmlab sample runs/mdlm --prompt "ROMEO:" --gen-len 64 --num-samples 4
  dlmlab sample runs/mdlm --threshold 0.9 --block-len 16 --kv-reuse dual --out samples.jsonl
  dlmlab sample runs/mdlm/checkpoints/step_0000300 --infill "To be, or [MASK:6] to be"
  dlmlab sample runs/mdlm --prompt "ROMEO:" --gen-len 32 --html trajectory.html
  dlmlab sample runs/ar --prompt "ROMEO:" --gen-len 64 --step 200
"""

RENAMED_FLAGS = {"--schedule": "--unmask-rule", "--cache": "--kv-reuse"}  # old flag -> new
MASK_SPAN = re.compile(r"\[MASK(?::(\d+))?\]")


DESCRIPTION = ("sample text from a run: masked-diffusion decoding for an mdlm model (orders, blocks, KV reuse, "
               "infilling, the trajectory page), left-to-right sampling for an AR model of any family")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = DESCRIPTION
    p.epilog = EPILOG
    p.add_argument("run", metavar="RUN_OR_CHECKPOINT",
                   help="a run folder, one of its checkpoints, or a Hugging Face LLaDA / Dream folder")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", metavar="FILE", help="read the prompt from FILE")
    src.add_argument("--infill", metavar="TEXT", help="fill the [MASK:n] spans of TEXT")
    p.add_argument("--gen-len", type=int, default=64, help="tokens to generate after the prompt (default 64)")
    p.add_argument("--num-samples", type=int, default=1, help="samples to draw (default 1)")
    p.add_argument("--batch-size", type=int, default=16, help="samples decoded together (default 16)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed of the sampling (default 0; the same seed gives the same samples)")
    d = DecodeConfig()
    p.add_argument("--steps", type=int, default=d.steps,
                   help=f"masked diffusion: denoising steps, shared among blocks (default {d.steps}; "
                        "--threshold / --factor take as many as they need)")
    p.add_argument("--order", default=d.order, help="confidence | margin | entropy | random")
    p.add_argument("--unmask-rule", default=d.unmask_rule,
                   help="how many positions each step commits: cosine | linear | ancestral (default "
                        f"{d.unmask_rule}; MaskGIT's cosine count, not the cosine noise schedule)")
    p.add_argument("--noise", default=None, metavar="NAME",
                   help="noise schedule of --unmask-rule ancestral: linear | loglinear | cosine, default fields "
                        f"(default: the one the model was trained with, its fields included, else {d.noise.name})")
    p.add_argument("--threshold", type=float, help="threshold parallel decoding (e.g. 0.9)")
    p.add_argument("--factor", type=float, help="factor-based parallel decoding (e.g. 1.0)")
    p.add_argument("--block-len", type=int, default=d.block_len, help="semi-autoregressive blocks (0: one)")
    p.add_argument("--attention", default=d.attention, help="model | block_causal")
    p.add_argument("--kv-reuse", default=d.kv_reuse,
                   help=f"keys/values reused across steps: none | prompt | prefix | dual (default {d.kv_reuse}: "
                        "exact; the others may be approximate)")
    for old, new in RENAMED_FLAGS.items():  # refused with a one-line error naming the new flag (see run)
        p.add_argument(old, dest=f"renamed_{old[2:]}", default=None, help=argparse.SUPPRESS)
    p.add_argument("--refresh-every", type=int, default=d.refresh_every,
                   help="approximate KV reuse: recompute every this many steps (default 0: at block starts only)")
    p.add_argument("--temperature", type=float, default=d.temperature,
                   help=f"sampling temperature (default {d.temperature}; 0: greedy)")
    p.add_argument("--top-p", type=float, default=d.top_p, help=f"nucleus sampling (default {d.top_p}: off)")
    p.add_argument("--out", metavar="FILE.jsonl", help="also write one JSON line per sample")
    p.add_argument("--format", choices=("text", "jsonl"), default="text", help="what to print (default text)")
    p.add_argument("--html", metavar="PAGE.html",
                   help="also write the denoising trajectory as a self-contained HTML page (mdlm models)")
    p.add_argument("--step", type=int, metavar="N", help="load checkpoint N of the run folder (default: the latest)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _limit(model) -> int | None:
    """The model's max positions (learned position embeddings), else None."""
    cfg = getattr(model, "cfg", None)
    return cfg.max_seq_len if getattr(cfg, "positions", None) == "learned" else None


def _load(path: str, run):
    """(denoiser, tokenizer, max positions or None, noise schedule or None) of a loaded masked-diffusion run."""
    if not getattr(run.objective, "denoises", False) or run.mask_id is None:
        raise UserError(f"{path} holds a model trained with objective {run.objective_name!r}; masked-diffusion "
                        "decoding needs an mdlm model (`dlmlab sample` samples an ar model left to right)")
    if run.tokenizer is None:
        raise UserError(f"{path} has no tokenizer, so prompts cannot be encoded")
    # trained to denoise, so a causal family (e.g. a Mamba mdlm run) is decoded with its own mask
    den = ModelDenoiser(run.model, run.mask_id, run.shift_logits, allow_causal=True)
    return den, run.tokenizer, _limit(run.model), run.noise


def noise_schedule(chosen: str | None, trained: NoiseSchedule | None) -> NoiseSchedule | str:
    """The decoder's ``noise``: ``chosen`` (``--noise NAME``, default fields), else the ``trained`` schedule
    object itself (its fields included), else the default."""
    if chosen is not None:
        return chosen
    return trained if trained is not None else DecodeConfig().noise


_DECODE_ERRORS = (ValueError, KeyError, IndexError, TypeError, OverflowError)


def show_text(tok, ids: list[int], mask_id: int | None = None) -> str:
    """The text of ``ids`` for people: ``tok.decode``, with each id the tokenizer cannot decode (a reserved id
    above its vocabulary, as in the induction study) shown as ``[id N]`` and the model's ``mask_id`` as the
    tokenizer shows it (else ``[M]``).  A dlmlab tokenizer reads id ``vocab_size`` as an mdlm run's mask
    (``[M]``); for a model whose mask is another id (or that has none) that id is a reserved one: ``[id N]``."""
    from dlmlab.data.tokenizer import MASK_TEXT

    ids = [int(i) for i in ids]
    V = getattr(tok, "vocab_size", None)
    if V not in ids and (mask_id is None or mask_id not in ids):
        try:
            return tok.decode(ids)
        except _DECODE_ERRORS:
            pass
    out, span = [], []
    for i in ids:
        piece = _decode_one(tok, i)
        if i == mask_id:
            piece = piece if piece is not None else MASK_TEXT
        elif piece is None or (i == V and piece == MASK_TEXT):  # not decodable / not this model's mask
            piece = f"[id {i}]"
        else:
            span.append(i)
            continue
        out += [tok.decode(span) if span else "", piece]
        span = []
    if span:
        out.append(tok.decode(span))
    return "".join(out)


def _decode_one(tok, i: int) -> str | None:
    try:
        return tok.decode([i])
    except _DECODE_ERRORS:
        return None


def _encode(tok, text: str) -> list[int]:
    try:
        return tok.encode(text)
    except ValueError as e:
        raise UserError(f"cannot encode the text: {e}") from None


def build_canvas(tok, mask_id: int, args) -> tuple[list[int], int, str]:
    """(canvas ids, prompt length, prompt text) for the chosen mode."""
    if args.infill is not None:
        ids, pos = [], 0
        for m in MASK_SPAN.finditer(args.infill):
            ids += _encode(tok, args.infill[pos:m.start()])
            ids += [mask_id] * int(m.group(1) or 1)
            pos = m.end()
        ids += _encode(tok, args.infill[pos:])
        if mask_id not in ids:
            raise UserError("--infill text has no [MASK] or [MASK:n] span")
        return ids, ids.index(mask_id), args.infill
    if args.prompt_file is not None:
        try:
            text = Path(args.prompt_file).read_text()
        except OSError as e:
            raise UserError(f"cannot read --prompt-file {args.prompt_file}: {e.strerror}") from None
    else:
        text = args.prompt or ""
    if args.gen_len < 1:
        raise UserError(f"--gen-len must be >= 1, got {args.gen_len}")
    ids = _encode(tok, text)
    return ids + [mask_id] * args.gen_len, len(ids), text


def check_output_path(path: str | None, option: str) -> None:
    """Refuse, before any decoding, an output path that cannot be written: a folder, or a file in a folder that
    does not exist (the samples would be lost at the end)."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        example = p / ("samples.jsonl" if option == "--out" else "trajectory.html")
        raise UserError(f"{option} {p} is a folder; give a file name, e.g. {option} {example}")
    if not p.parent.is_dir():
        raise UserError(f"{option} {p}: the folder {p.parent} does not exist; create it first (mkdir -p {p.parent})")


def trained_length(loaded) -> int | None:
    """The window length (``data.seq_len``) a ``dlmlab train`` run was trained on, else None."""
    import json

    from dlmlab.rundir.load import has_run_config

    src = Path(loaded.source)
    run = src.parent.parent if src.parent.name == "checkpoints" else src
    if not has_run_config(src):
        return None
    try:
        seq_len = json.loads((run / "config.json").read_text(encoding="utf-8")).get("data", {}).get("seq_len")
    except (OSError, ValueError, AttributeError):
        return None
    return seq_len if isinstance(seq_len, int) else None


def _warn_length(loaded, total: int) -> None:
    trained = trained_length(loaded)
    if trained is not None and total > trained:
        print(f"warning: prompt + generated = {total} tokens, longer than the {trained}-token windows this model "
              f"was trained on (data.seq_len); positions past {trained} were never trained", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from dlmlab import load

    for old, new in RENAMED_FLAGS.items():
        if getattr(args, f"renamed_{old[2:]}", None) is not None:
            raise UserError(f"{old} was renamed {new}: use {new} {getattr(args, f'renamed_{old[2:]}')}")
    if args.num_samples < 1 or args.batch_size < 1:
        raise UserError("--num-samples and --batch-size must be >= 1")
    check_output_path(args.out, "--out")
    check_output_path(args.html, "--html")
    cfg = DecodeConfig(steps=args.steps, order=args.order, unmask_rule=args.unmask_rule,
                       noise=noise_schedule(args.noise, None), threshold=args.threshold, factor=args.factor,
                       block_len=args.block_len, attention=args.attention, kv_reuse=args.kv_reuse,
                       refresh_every=args.refresh_every, temperature=args.temperature, top_p=args.top_p)
    loaded = load(args.run, step=args.step)
    page = None
    if getattr(loaded.objective, "shift_logits", False):  # a next-token objective: left to right
        rows = _sample_ar(loaded, args)
    else:
        rows, page = _sample_diffusion(loaded, cfg, args)
    for r in rows:  # every row says what made it
        r.update({"model": str(args.run), "step": loaded.step, "family": loaded.family,
                  "objective": loaded.objective_name})
    lines = [strict_json(r) for r in rows]
    if args.format == "jsonl":
        print("\n".join(lines))
    else:
        for r in rows:  # approximate KV reuse says so on every sample
            label = f" (approximate: kv_reuse {r['kv_reuse']})" if r.get("exactness") == "approximate" else ""
            print(f"--- sample {r['index']}{label} ---")
            print(r["full"])
    sys.stdout.flush()  # the samples are shown before any file is written
    if args.out:
        atomic_write_text(Path(args.out), "\n".join(lines) + "\n")
    if page is not None:
        page()
    return 0


def _sample_diffusion(loaded, cfg: DecodeConfig, args) -> list[dict]:
    den, tok, limit, trained = _load(args.run, loaded)
    cfg = dataclasses.replace(cfg, noise=noise_schedule(args.noise, trained))
    mask_id = den.mask_id
    canvas, P, prompt_text = build_canvas(tok, mask_id, args)
    if limit is not None and len(canvas) > limit:
        raise UserError(f"prompt + generated = {len(canvas)} tokens exceeds the model's max_seq_len {limit}")
    _warn_length(loaded, len(canvas))
    gen = torch.Generator().manual_seed(args.seed)
    rows, records, first, lens = [], [], None, None
    with torch.no_grad():
        for start in range(0, args.num_samples, args.batch_size):
            n = min(args.batch_size, args.num_samples - start)
            x = torch.tensor([canvas] * n)
            if args.html and start == 0 and _lens_points(den) is not None:
                res, lens = _decode_with_lens(den, x, P, cfg, gen, args)
            else:
                res = decode(den, x, P, cfg, gen, progress=not args.no_progress, record=bool(args.html) and start == 0)
            if start == 0:
                records, first = res.trajectory, x
            for i, ids in enumerate(res.tokens.tolist()):
                filled = [t for t, c in zip(ids, canvas) if c == mask_id]
                rows.append({"index": start + i, "prompt": prompt_text, "text": show_text(tok, ids[P:], mask_id),
                             "full": show_text(tok, ids, mask_id), "filled_ids": filled, "steps": res.steps,
                             "forwards": res.forwards, "kv_reuse": res.kv_reuse, "exactness": res.exactness,
                             "config": cfg.to_data()})
    page = (lambda: _write_html(args, records, first, P, mask_id, tok, cfg, lens)) if args.html else None
    return rows, page


def _lens_points(den) -> list[str] | None:
    """The logit lens's hook points of the denoiser's model, or None when it has no residual stream to read."""
    from dlmlab.sampling.lens import lens_points

    if den.hooked is None:
        return None
    try:
        return lens_points(den.hooked)
    except UserError:
        return None


def _decode_with_lens(den, x: torch.Tensor, P: int, cfg: DecodeConfig, gen: torch.Generator, args):
    """The first batch's decode with its residual stream cached at every step (the same tokens as a plain
    decode: caching reads activations, it changes none) and the logit lens per layer for the page."""
    from dlmlab.sampling.lens import trajectory_lens
    from dlmlab.sampling.trajectory_cache import run_sampler_with_cache

    traj = run_sampler_with_cache(den, x, P, cfg, gen, names_filter=_lens_points(den),
                                  progress=not args.no_progress)
    return traj.result, trajectory_lens(traj, den)


def _write_html(args, records, canvas: torch.Tensor, P: int, mask_id: int, tok, cfg: DecodeConfig,
                lens=None) -> None:
    from dlmlab.sampling.trajectory_html import trajectory_page

    def text(i: int) -> str:
        return show_text(tok, [i], mask_id)

    shown = canvas.shape[0]
    fields = ", ".join(f"{f.name}={getattr(cfg, f.name)}" for f in dataclasses.fields(cfg))
    notes = [f"model: {args.run}" + (f" (step {args.step})" if args.step is not None else ""),
             f"decoder: {fields}; seed {args.seed}",
             f"samples shown: {shown} of {args.num_samples} (the first batch)"]
    page = trajectory_page(records, canvas, P, mask_id, text, title="dlmlab sample: denoising trajectory",
                           notes=notes, lens=lens)
    atomic_write_text(Path(args.html), page)


def _sample_ar(loaded, args) -> list[dict]:
    from dlmlab.sampling.ar import sample_ar, supports_kv_cache

    if args.html:
        raise UserError("--html shows a denoising trajectory; this is an AR model (sampled left to right)")
    if args.infill is not None:
        raise UserError(f"{args.run} holds an AR model, which cannot fill --infill spans; use --prompt")
    if args.kv_reuse != DecodeConfig().kv_reuse:
        raise UserError(f"--kv-reuse {args.kv_reuse} is masked-diffusion KV reuse; {args.run} holds an AR model, "
                        "which is KV-cached whenever it can be (no option needed)")
    if loaded.tokenizer is None:
        raise UserError(f"{args.run} has no tokenizer, so prompts cannot be encoded")
    if args.gen_len < 1:
        raise UserError(f"--gen-len must be >= 1, got {args.gen_len}")
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        raise UserError(f"--temperature must be >= 0 and --top-p in (0, 1], got {args.temperature}, {args.top_p}")
    tok = loaded.tokenizer
    if args.prompt_file is not None:
        try:
            text = Path(args.prompt_file).read_text()
        except OSError as e:
            raise UserError(f"cannot read --prompt-file {args.prompt_file}: {e.strerror}") from None
    else:
        text = args.prompt or ""
    ids = _encode(tok, text)
    if not ids:
        raise UserError("an AR model samples after a prompt: give --prompt or --prompt-file (at least one token)")
    limit = _limit(loaded.model)
    if limit is not None and len(ids) + args.gen_len > limit:
        raise UserError(f"prompt + generated = {len(ids) + args.gen_len} tokens exceeds the model's max_seq_len {limit}")
    _warn_length(loaded, len(ids) + args.gen_len)
    cached = supports_kv_cache(loaded.model)
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    with torch.no_grad():
        for start in range(0, args.num_samples, args.batch_size):
            n = min(args.batch_size, args.num_samples - start)
            out = sample_ar(loaded.model, torch.tensor([ids] * n), args.gen_len, args.temperature, args.top_p, gen)
            for i, row in enumerate(out.tolist()):
                rows.append({"index": start + i, "prompt": text, "text": show_text(tok, row[len(ids):]),
                             "full": show_text(tok, row), "generated_ids": row[len(ids):],
                             "objective": loaded.objective_name,
                             "family": loaded.family, "step": loaded.step, "kv_cache": cached,
                             "config": {"temperature": args.temperature, "top_p": args.top_p}})
    return rows
