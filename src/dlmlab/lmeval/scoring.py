"""Token-level scoring for the harness backend: exact AR log-likelihoods and Monte Carlo masked-diffusion bounds.

Requests are ``(context_ids, continuation_ids)`` pairs of token lists.  Nothing here depends on batch
composition: AR batches are right-padded (a causal model never sees later positions), diffusion rows
are batched only with rows of the same length (no padding a bidirectional model would see), and each
request's Monte Carlo draws are seeded from the seed and its own tokens.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass

import torch

from dlmlab.lmeval import estimators
from dlmlab.objectives.mdlm import log_probs_no_mask


@dataclass(frozen=True)
class Score:
    """One request's result: log-likelihood (nats; for a DLM the negative NELBO bound), its Monte Carlo
    standard error (0 when exact), whether the continuation is the greedy one, and forwards spent."""

    loglik: float
    se: float
    is_greedy: bool
    forwards: int


def request_generator(seed: int, ctx: list[int], cont: list[int]) -> torch.Generator:
    """A generator seeded from ``seed`` and the request's tokens (the same draws wherever it is batched)."""
    data = torch.tensor(ctx + [-1] + cont, dtype=torch.int64).numpy().tobytes()
    return torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(data)) % (2 ** 63))


def _logits(model, x: torch.Tensor, kwargs: dict) -> torch.Tensor:
    out = model(x, **kwargs)
    return getattr(out, "logits", out)


@torch.no_grad()
def ar_scores(model, requests: list[tuple[list[int], list[int]]], max_length: int, batch_size: int,
              forward_kwargs: dict, device) -> list[Score]:
    """Exact teacher-forced log-likelihood of each continuation (the harness's ``hf`` recipe: the last
    ``max_length + 1`` tokens, input all but the last, continuation logits at the end)."""
    inputs = []
    for ctx, cont in requests:
        whole = (ctx + cont)[-(max_length + 1):]
        inputs.append((whole[:-1], cont[-(len(whole) - 1):] if len(cont) >= len(whole) else cont))
    order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i][0]))
    out: list[Score | None] = [None] * len(inputs)
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        T = max(len(inputs[i][0]) for i in idx)
        x = torch.zeros(len(idx), T, dtype=torch.long)
        for r, i in enumerate(idx):
            x[r, :len(inputs[i][0])] = torch.tensor(inputs[i][0])
        logp = _logits(model, x.to(device), forward_kwargs).float().log_softmax(-1).cpu()
        for r, i in enumerate(idx):
            inp, cont = inputs[i]
            n = len(cont)
            lp = logp[r, len(inp) - n:len(inp)]  # [n, V]
            tgt = torch.tensor(cont)
            ll = float(lp.gather(-1, tgt[:, None]).sum())
            out[i] = Score(ll, 0.0, bool((lp.argmax(-1) == tgt).all()), 1)
    return out  # type: ignore[return-value]


class DiffusionScorer:
    """Monte Carlo NELBO of continuations under a masked-diffusion model (see :mod:`dlmlab.lmeval.estimators`).

    ``denoiser``: a :class:`~dlmlab.sampling.Denoiser` (shifted outputs already aligned); every row of every
    request in one call is planned first, identical rows (e.g. the fully masked continuation of several
    answer choices after one prompt) are computed once, and rows of equal length run together.
    """

    def __init__(self, denoiser, mask_id: int, method: str, mc_num: int, batch_size: int, seed: int,
                 llada_batch: int = 32, device=None) -> None:
        self.den, self.mask_id, self.method, self.mc_num = denoiser, int(mask_id), method, int(mc_num)
        self.batch_size, self.seed, self.llada_batch, self.device = int(batch_size), int(seed), llada_batch, device
        self.last_forwards = 0  # distinct rows run by the last score() call
        self.forwards_run = 0  # ... by every call so far

    def plans(self, requests):
        return [estimators.plan(self.method, len(cont), self.mc_num, request_generator(self.seed, ctx, cont),
                                self.llada_batch) for ctx, cont in requests]

    @torch.no_grad()
    def score(self, requests: list[tuple[list[int], list[int]]]) -> list[tuple[float, float, int]]:
        """[(nelbo, standard error, rows)] per request (rows: its planned forwards); ``last_forwards`` is the
        number of distinct rows the call ran (rows shared between requests run once)."""
        plans = self.plans(requests)
        rows: dict[tuple[int, ...], int] = {}  # distinct noisy row -> index
        users: list[list[tuple[int, int]]] = []  # per distinct row: (request, plan row) that read it
        ces = [torch.zeros(m.shape[0], m.shape[1], dtype=torch.float64) for m in plans]
        for q, ((ctx, cont), masks) in enumerate(zip(requests, plans)):
            c = torch.tensor(cont, dtype=torch.long)
            for j, m in enumerate(masks):
                key = (len(ctx),) + tuple(ctx) + tuple(torch.where(m, torch.full_like(c, self.mask_id), c).tolist())
                if key not in rows:
                    rows[key] = len(rows)
                    users.append([])
                users[rows[key]].append((q, j))
        keys = list(rows)
        self.last_forwards = len(keys)
        self.forwards_run += len(keys)
        for (_, ctx_len), idx in sorted(_by_shape(keys).items()):
            for s in range(0, len(idx), self.batch_size):
                chunk = idx[s:s + self.batch_size]
                x = torch.tensor([keys[i][1:] for i in chunk], dtype=torch.long)
                logits = self.den(x.to(self.device), clean_len=ctx_len, t=torch.ones(len(chunk)))
                lg = logits[:, ctx_len:]
                logp = log_probs_no_mask(lg if lg.dtype == torch.float64 else lg.float(), self.mask_id).cpu()
                for r, i in enumerate(chunk):
                    for q, j in users[i]:
                        cont = requests[q][1]
                        tgt = torch.tensor(cont, dtype=torch.long)
                        lp = logp[r]
                        ces[q][j] = -lp.gather(-1, tgt[:, None]).squeeze(-1).double()
        out = []
        for q, masks in enumerate(plans):
            if masks.shape[1] == 0:
                out.append((0.0, 0.0, 0))
                continue
            nelbo, se = estimators.combine(self.method, masks, ces[q])
            out.append((nelbo, se, masks.shape[0]))
        return out


def _by_shape(keys: list[tuple[int, ...]]) -> dict[tuple[int, int], list[int]]:
    """Row indices grouped by (row length, prompt length): rows run together only when both agree."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        groups[(len(k) - 1, k[0])].append(i)
    return groups
