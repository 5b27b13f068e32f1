"""The masked-diffusion decoder: orders, count schedules and adaptive rules, blocks, caches, trajectories.

``decode(model, canvas, prompt_len, cfg)`` fills every mask id at positions >= ``prompt_len`` of
``canvas`` [B,N] (generation: the prompt followed by masks; infilling: masks anywhere after the
prompt).  The generated part is split into blocks of ``cfg.block_len`` decoded left to right; inside
a block each step runs the model where needed (see :mod:`dlmlab.sampling.kv_reuse`), draws a token at
every masked position of the block, scores it (:mod:`dlmlab.sampling.orders`) and commits the best
``k`` (:mod:`dlmlab.sampling.schedules`).  Rows progress independently: a row whose block is done
drops out of the forwards, and with the adaptive rules each row commits its own number per step.

The model is any bidirectional ``tokens -> logits`` model with an explicit ``mask_id`` (and
``shift_logits`` for Dream's convention), or anything with its own
:class:`~dlmlab.sampling.denoiser.Denoiser` (see :func:`~dlmlab.sampling.denoiser.as_denoiser`).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch

from dlmlab.config import ConfigError
from dlmlab.errors import UserError
from dlmlab.progress import bar
from dlmlab.sampling.kv_reuse import SpanKV, block_causal_mask, concat, kv_reuse_exactness, rows, span
from dlmlab.sampling.config import DecodeConfig
from dlmlab.sampling.denoiser import Denoiser, as_denoiser
from dlmlab.sampling.gumbel import draw, filtered_log_probs
from dlmlab.sampling.interventions import Intervention, StepContext, check_interventions, intervening
from dlmlab.sampling.orders import order_scores
from dlmlab.sampling.schedules import UNMASK_SCHEDULES, ancestral_count, factor_count, threshold_count
from dlmlab.sampling.trajectory import TOP_K, Activation, DecodeResult, StepRecord, TraceConfig


def _blocks(P: int, N: int, block_len: int) -> list[tuple[int, int]]:
    if P >= N:
        return []
    if block_len <= 0:
        return [(P, N)]
    return [(s, min(s + block_len, N)) for s in range(P, N, block_len)]


def _commit_counts(cfg: DecodeConfig, S: torch.Tensor, plans: list[list[int]], j: int, n_masked: torch.Tensor,
                   steps_b: int, generator: torch.Generator | None) -> torch.Tensor:
    """Scores [R,Lb] (-inf off candidates) -> commits per row [R] for step ``j`` of the block."""
    if cfg.threshold is not None:
        k = threshold_count(S.sort(1, descending=True).values, cfg.threshold)
    elif cfg.factor is not None:
        k = factor_count(S.sort(1, descending=True).values, cfg.factor)
    elif cfg.unmask_rule == "ancestral":
        k = ancestral_count(n_masked, j, steps_b, generator, cfg.noise)  # the schedule object (DecodeConfig.noise)
    else:
        k = torch.tensor([p[j] if j < len(p) else 10**9 for p in plans], device=S.device)
    return torch.minimum(k, n_masked)


class _Run:
    """Mutable state of one decode call (caches, self-conditioning, counters)."""

    def __init__(self, den: Denoiser, x: torch.Tensor, P: int, cfg: DecodeConfig, trace: TraceConfig | None,
                 interventions: tuple[Intervention, ...] = ()) -> None:
        self.den, self.x, self.P, self.cfg, self.trace = den, x, P, cfg, trace
        self.interventions = interventions
        self.B, self.N = x.shape
        self.block_causal = cfg.attention == "block_causal"
        self.exactness = kv_reuse_exactness(cfg.kv_reuse, cfg.attention, den.prompt_causal)
        self.exact = self.exactness == "exact"
        self.ctx: list = []  # keys/values of positions [0, ctx_len)
        self.suffix: list = []
        self.first: torch.Tensor | None = None  # aligned logits at the steady window's first position [B,V]
        self.sc: torch.Tensor | None = None  # self-conditioning input [B,N,V]
        self.pending = None  # (rows, start, logits) whose soft prediction feeds the next forward
        self.use_sc = cfg.self_cond and den.uses_self_cond
        self.forwards = self.positions = 0
        self.acts: list[Activation] = []
        # the traced hook points, resolved once (a set lookup per point at each traced step, not a glob match)
        self.traced_points = frozenset(den.hooked.select_hooks(trace.hooks)) if trace and trace.hooks else frozenset()

    def new_block(self) -> None:
        """Self-conditioning starts afresh in each block (whatever the cache kind saw of it before)."""
        self.pending = None
        if self.sc is not None:
            self.sc.zero_()

    @property
    def ctx_len(self) -> int:
        return self.ctx[0][0].shape[2] if self.ctx else 0

    def self_cond(self, idx, ws: int, we: int) -> torch.Tensor | None:
        if not self.use_sc:
            return None
        if self.pending is not None:
            prow, pws, plogits = self.pending
            if self.sc is None:
                self.sc = plogits.new_zeros(self.B, self.N, plogits.shape[-1]).float()
            soft = self.den.soft_prediction(plogits)
            if prow is None:
                self.sc[:, pws:pws + plogits.shape[1]] = soft
            else:
                self.sc[prow, pws:pws + plogits.shape[1]] = soft
            self.pending = None
        if self.sc is None:
            return None
        sc = self.sc[:, ws:we]
        return sc if idx is None else sc[idx]

    def forward(self, idx, ws: int, we: int, s: int, ve: int, step: int, cache, attn_key_len: int) -> torch.Tensor:
        """Run rows ``idx`` (None: all) on positions ``ws:we`` -> aligned logits [R, we-ws, V]."""
        x = self.x if idx is None else self.x[idx]
        tokens = x[:, ws:we]
        t = (x[:, s:ve] == self.den.mask_id).float().mean(1)
        attn = None
        if self.block_causal:
            attn = block_causal_mask(ws, we, attn_key_len, self.P, self.cfg.block_len, self.den.prompt_causal,
                                     tokens.device)
        elif attn_key_len != we:  # a cached suffix: the window's queries are all noisy and see everything
            attn = "bidirectional"
        first = None
        if ws > 0 and self.first is not None:
            first = self.first if idx is None else self.first[idx]
        sc = self.self_cond(idx, ws, we)
        call = lambda: self.den(tokens, clean_len=s, t=t, attn=attn, kv_cache=cache,  # noqa: E731
                                self_cond=sc, first=first)
        firing = [iv for iv in self.interventions if iv.fires(step)] if self.interventions else None
        tracing = self.trace is not None and self.trace.wants(step)
        if firing or tracing:
            rows_t = torch.arange(self.B) if idx is None else idx.cpu()
            with contextlib.ExitStack() as hooks:  # interventions first: a trace records what they leave
                if firing:
                    hooks.enter_context(intervening(self.den.hooked, firing,
                                                    StepContext(step, rows_t, ws, we, x, self.den.mask_id, self.P)))
                store = hooks.enter_context(self.den.hooked.cache(self.traced_points.__contains__)) if tracing else {}
                logits = call()
            self.acts.extend(Activation(step, n, rows_t, ws, v) for n, v in store.items())
        else:
            logits = call()
        self.forwards += 1
        self.positions += tokens.shape[0] * tokens.shape[1]
        if self.use_sc:
            self.pending = (idx, ws, logits)
        return logits


@torch.no_grad()
def decode(model, canvas: torch.Tensor, prompt_len: int, cfg: DecodeConfig | None = None,
           generator: torch.Generator | None = None, *, mask_id: int | None = None, shift_logits: bool = False,
           trace: TraceConfig | None = None, callback: Callable[[StepRecord], None] | None = None,
           record: bool = False, progress: bool = False,
           interventions: Sequence[Intervention] | None = None) -> DecodeResult:
    """canvas [B,N] (mask ids at positions >= ``prompt_len`` to fill) -> :class:`DecodeResult` (tokens [B,N]).

    model: any bidirectional model ``tokens -> logits`` with its ``mask_id`` (required; ``shift_logits``:
    logits at ``i - 1`` predict token ``i``), a model with its own denoiser (``model.as_denoiser``, e.g.
    a PreDiffLM) or a :class:`Denoiser`.  Caches other than ``none`` and ``block_causal`` attention need
    a toolkit attention model.  ``record`` keeps every :class:`StepRecord` in the result; ``callback`` gets
    each one as it happens; ``trace`` chooses hook points and steps whose activations are recorded;
    ``interventions`` (:class:`~dlmlab.sampling.interventions.Intervention`) change activations at chosen steps
    and positions (a model with hook points).  With neither the decode is the plain one, bit for bit.
    """
    cfg = cfg or DecodeConfig()
    cfg.validate()
    den = as_denoiser(model, mask_id, shift_logits)
    if not den.supports_kv_cache and (cfg.kv_reuse != "none" or cfg.attention != "model"):
        raise UserError(f"kv_reuse={cfg.kv_reuse!r} / attention={cfg.attention!r} need a model that takes a KV cache "
                        "and attention masks (a toolkit Transformer); use kv_reuse='none', attention='model'")
    if trace is not None and trace.hooks and den.hooked is None:
        raise UserError("trace hooks need a model with hook points (a dlmlab HookedModule)")
    interventions = check_interventions(interventions, den.hooked)
    if interventions and kv_reuse_exactness(cfg.kv_reuse, cfg.attention, den.prompt_causal) != "exact":
        raise UserError(f"interventions need kv_reuse='none' or an exact KV reuse; kv_reuse={cfg.kv_reuse!r} is "
                        "approximate here (its reused keys/values would carry an intervention past its steps)")
    if canvas.dim() != 2:
        raise ValueError(f"canvas must be [batch, positions], got shape {tuple(canvas.shape)}")
    B, N = canvas.shape
    P = prompt_len
    if not 0 <= P <= N:
        raise ValueError(f"prompt_len must be in [0, {N}], got {P}")
    M = den.mask_id
    if den.shift and P < 1:
        raise ConfigError("a shifted (DiffuGPT-style) model needs a prompt of at least one token")
    if bool((canvas[:, :P] == M).any()):
        raise ValueError(f"prompt contains the mask token id {M}")
    if cfg.kv_reuse == "dual" and den.alibi:
        raise ConfigError("kv_reuse 'dual' does not support ALiBi positions (use 'prefix')")
    den.eval()
    run = _Run(den, canvas.clone(), P, cfg, trace, interventions)
    x = run.x
    blocks = _blocks(P, N, cfg.block_len)
    wanted = record or callback is not None
    records: list[StepRecord] = []
    reuse_ok = cfg.reuse_unchanged and not run.use_sc
    pbar = bar(total=int((x[:, P:] == M).sum()), desc="decode", unit="tok", disable=not progress)
    if cfg.kv_reuse == "prompt" and run.exact and P > 0:
        kv = SpanKV()
        run.first = den.encode_context(x[:, :P], kv)
        run.ctx = kv.recorded()
        run.forwards += 1
        run.positions += B * P
    step = 0
    L = N - P
    for bi, (s, e) in enumerate(blocks):
        ve = e if run.block_causal else N
        steps_b = max(1, round(cfg.steps * (e - s) / L))
        plans = [] if cfg.unmask_rule not in UNMASK_SCHEDULES else [
            UNMASK_SCHEDULES[cfg.unmask_rule](int(m), steps_b) if m > 0 else [] for m in (x[:, s:e] == M).sum(1)]
        run.new_block()
        fresh = torch.zeros(B, dtype=torch.bool)
        blk = None  # the block's latest logits [B, e-s, V]
        j = 0
        while True:
            still = x[:, s:e] == M
            active = still.any(1).cpu()
            if not bool(active.any()):
                break
            n_before = len(run.acts)
            fires = bool(run.interventions) and any(iv.fires(step) for iv in run.interventions)
            if fires:  # every active row runs (none reuses an output), the step's outputs are not reused after it
                forwarded, kept = _intervened_forward(run, s, ve, step, active), None
            else:  # a traced step runs every active row (a reused row's output is kept: the decode is unchanged)
                traced = reuse_ok and run.trace is not None and run.trace.wants(step) and bool((active & fresh).any())
                kept = fresh.clone() if traced else None
                forwarded = _step_forward(run, cfg, s, e, ve, j, step, active, fresh, reuse_ok and not traced)
            if forwarded is not None:
                idx, ws, logits = forwarded
                if blk is None:
                    blk = logits.new_zeros(B, e - s, logits.shape[-1])
                if idx is None and kept is None:
                    blk = logits[:, s - ws:e - ws].clone()
                    fresh[:] = True
                else:
                    r = torch.arange(B) if idx is None else idx.cpu()
                    part = logits[:, s - ws:e - ws]
                    if kept is not None:
                        new_rows = ~kept[r]
                        r, part = r[new_rows], part[new_rows.to(part.device)]
                    blk[r.to(blk.device)] = part
                    fresh[r] = True
                if fires:
                    fresh[:] = False
            # draw and commit on the active rows
            A = active.nonzero().squeeze(1)
            all_rows = A.numel() == B
            lg = blk if all_rows else blk[A]
            st = still if all_rows else still[A]
            where = st.nonzero(as_tuple=True)
            logp = filtered_log_probs(lg[where], cfg.temperature, cfg.top_p, banned=M)
            tok = draw(logp, cfg.temperature, generator)
            scores = torch.full(st.shape, float("-inf"), dtype=torch.float64, device=st.device)
            scores[where] = order_scores(cfg.order, logp, tok, generator)
            k = _commit_counts(cfg, scores, [plans[int(r)] for r in A] if plans else [], j, st.sum(1), steps_b, generator)
            kmax = int(k.max())
            chosen = scores.topk(kmax, dim=1).indices
            commit = torch.zeros_like(st).scatter_(1, chosen, torch.arange(kmax, device=st.device)[None] < k[:, None])
            tok_mat = torch.zeros(st.shape, dtype=x.dtype, device=x.device)
            tok_mat[where] = tok.to(x.dtype)
            sub = x[A, s:e] if not all_rows else x[:, s:e]
            new = torch.where(commit, tok_mat, sub)
            if all_rows:
                x[:, s:e] = new
            else:
                x[A, s:e] = new
            changed = commit.any(1).cpu()
            fresh[A[changed]] = False
            pbar.update(int(commit.sum()))
            if wanted:
                rec = _record(run, step, bi, (s, e), forwarded is not None, A, all_rows, where, logp, tok, commit,
                              blk, n_before)
                if callback is not None:
                    callback(rec)
                if record:
                    records.append(rec)
            del run.acts[n_before:]  # the step's record holds them (or nobody asked for them)
            step += 1
            j += 1
    pbar.close()
    _check_steps_reached(step, interventions, trace)
    return DecodeResult(tokens=x, steps=step, forwards=run.forwards, positions=run.positions, kv_reuse=cfg.kv_reuse,
                        exactness=run.exactness, trajectory=records)


def _check_steps_reached(n_steps: int, interventions: Sequence[Intervention], trace: TraceConfig | None) -> None:
    """Refuse, in one line, intervention or trace steps the decode never reached (they would be ignored)."""
    for what, steps in [(f"intervention at {iv.name!r}: at_steps", iv.at_steps) for iv in interventions] + \
            [("steps", None if trace is None else trace.steps)]:
        past = sorted(x for x in (steps or ()) if x >= n_steps)
        if past:
            raise UserError(f"{what} {past} out of range: the decode took {n_steps} steps (0 to {n_steps - 1})")


def _intervened_forward(run: _Run, s: int, ve: int, step: int, active: torch.Tensor):
    """A step at which an intervention fires: the active rows run on the whole canvas with no reused keys or
    values (the forward of ``kv_reuse="none"``), so the intervention acts at this step only and on every active
    row; nothing it computes is stored for later steps (an exact cache is extended at the next step)."""
    idx = None if bool(active.all()) else active.nonzero().squeeze(1)
    return idx, 0, run.forward(idx, 0, run.N, s, ve, step, None, run.N)


def _step_forward(run: _Run, cfg: DecodeConfig, s: int, e: int, ve: int, j: int, step: int,
                  active: torch.Tensor, fresh: torch.Tensor, reuse_ok: bool):
    """Run the model as this step's KV-reuse kind requires -> (rows or None, window start, logits) or None (reused)."""
    N = run.N
    need = active & ~fresh if reuse_ok else active
    if cfg.kv_reuse == "none":
        if not bool(need.any()):
            return None
        idx = None if bool(need.all()) else need.nonzero().squeeze(1)
        return idx, 0, run.forward(idx, 0, N, s, ve, step, None, N)
    if run.exact:
        if cfg.kv_reuse in ("prefix", "dual") and run.ctx_len < s:  # j == 0, or j == 1 after an intervened step
            c = run.ctx_len
            kv = SpanKV(prefix=run.ctx)
            logits = run.forward(None, c, ve, s, ve, step, kv, ve)
            run.ctx = concat(run.ctx, span(kv.recorded(), 0, s - c))
            run.first = logits[:, s - c]
            return None, c, logits
        ws = run.ctx_len
    else:
        refresh = j == 0 or (cfg.refresh_every > 0 and j % cfg.refresh_every == 0)
        ws = run.P if cfg.kv_reuse == "prompt" else s
        if refresh:
            kv = SpanKV()
            logits = run.forward(None, 0, N, s, ve, step, kv, N)
            rec = kv.recorded()
            run.ctx = span(rec, 0, ws)
            run.suffix = span(rec, e) if cfg.kv_reuse == "dual" and e < N else []
            run.first = logits[:, ws] if ws < N else None
            return None, 0, logits
    we = e if run.suffix else ve
    if not bool(need.any()):
        return None
    idx = None if bool(need.all()) else need.nonzero().squeeze(1)
    cache = SpanKV(prefix=rows(run.ctx, idx), suffix=rows(run.suffix, idx))
    key_len = we + (N - e if run.suffix else 0)
    return idx, ws, run.forward(idx, ws, we, s, ve, step, cache, key_len)


def _record(run: _Run, step: int, bi: int, span_: tuple[int, int], forwarded: bool, A: torch.Tensor, all_rows: bool,
            where, logp: torch.Tensor, tok: torch.Tensor, commit: torch.Tensor, blk, n_before: int) -> StepRecord:
    B, N = run.B, run.N
    s, e = span_
    dev = commit.device
    rows_abs = A.to(dev)[where[0]]  # each candidate's row and canvas position
    cols = where[1] + s
    # the record's entropy and top-k in float32 (within 1e-6 of float64, at a fraction of the per-step cost);
    # the probabilities (confidence, top-k) are read from the float64 distribution the step drew from
    k = min(TOP_K, logp.shape[-1])
    lp32 = logp.float()
    p32 = lp32.exp()
    top_i = p32.topk(k, dim=-1).indices
    ent_c = torch.nansum(p32.mul_(lp32), -1).neg_()  # NaN only where p = 0 and log p = -inf: adds 0
    conf = torch.full((B, N), float("nan"), dtype=torch.float64, device=dev)
    ent = conf.clone()
    conf[rows_abs, cols] = logp.gather(-1, tok[:, None]).squeeze(-1).exp()
    ent[rows_abs, cols] = ent_c.double()
    committed = torch.zeros(B, N, dtype=torch.bool, device=dev)
    if all_rows:
        committed[:, s:e] = commit
    else:
        committed[A, s:e] = commit
    top_ids = torch.full((B, N, k), -1, dtype=torch.long, device=dev)
    top_probs = torch.full((B, N, k), float("nan"), dtype=torch.float64, device=dev)
    top_ids[rows_abs, cols] = top_i
    top_probs[rows_abs, cols] = logp.gather(-1, top_i).exp()
    want_logits = run.trace is not None and run.trace.logits
    return StepRecord(step=step, block=bi, block_span=span_, forwarded=forwarded, tokens=run.x.clone(),
                      committed=committed, confidence=conf, entropy=ent, activations=run.acts[n_before:],
                      logits=blk.clone() if want_logits and blk is not None else None,
                      kv_reuse=run.cfg.kv_reuse, exact=run.exact, top_ids=top_ids, top_probs=top_probs)


def prompt_canvas(model, prompt: torch.Tensor, gen_len: int, kwargs: dict, error=ValueError):
    """(denoiser, canvas [B, P+gen_len]): ``prompt`` [B,P] followed by ``gen_len`` mask ids; takes ``mask_id`` and
    ``shift_logits`` out of ``kwargs``; a bad shape or length raises ``error`` in one line."""
    if prompt.dim() != 2:
        raise error(f"prompt must be [batch, tokens], got shape {tuple(prompt.shape)}")
    if gen_len < 1:
        raise error(f"gen_len must be >= 1, got {gen_len}")
    den = as_denoiser(model, kwargs.pop("mask_id", None), kwargs.pop("shift_logits", False))
    masks = torch.full((prompt.shape[0], gen_len), den.mask_id, dtype=prompt.dtype, device=prompt.device)
    return den, torch.cat([prompt, masks], 1)


def generate(model, prompt: torch.Tensor, gen_len: int, cfg: DecodeConfig | None = None,
             generator: torch.Generator | None = None, **kwargs) -> DecodeResult:
    """prompt [B,P] -> :class:`DecodeResult` with tokens [B, P+gen_len] (``kwargs`` as :func:`decode`)."""
    den, canvas = prompt_canvas(model, prompt, gen_len, kwargs)
    return decode(den, canvas, prompt.shape[1], cfg, generator, **kwargs)
