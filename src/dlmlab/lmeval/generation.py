"""``generate_until`` for the harness backend: dlmlab's samplers (AR with its KV cache, masked diffusion with
threshold / blocks / caches), stop strings and ``max_gen_toks``.

Prompts of unequal lengths are batched by length (rows of one batch share their prompt length), so a
batch gives exactly what each prompt gives alone: no pad token reaches a bidirectional model or shifts
a learned position.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from dlmlab.errors import UserError


@dataclass(frozen=True)
class GenRequest:
    """One request: prompt token ids, stop strings, tokens to generate, temperature."""

    prompt: list[int]
    until: tuple[str, ...]
    max_gen_toks: int
    temperature: float


def parse_gen_kwargs(kwargs: dict, default_max: int, default_temperature: float) -> tuple[tuple[str, ...], int, float]:
    """(until, max_gen_toks, temperature) from a task's gen_kwargs (``do_sample`` False means greedy)."""
    kw = dict(kwargs or {})
    until = kw.pop("until", None) or []
    if isinstance(until, str):
        until = [until]
    if not isinstance(until, (list, tuple)) or not all(isinstance(u, str) for u in until):
        raise UserError(f"gen_kwargs until must be a string or a list of strings, got {until!r}")
    max_gen = int(kw.pop("max_gen_toks", default_max))
    if max_gen < 1:
        raise UserError(f"max_gen_toks must be >= 1, got {max_gen}")
    temperature = float(kw.pop("temperature", default_temperature))
    if kw.pop("do_sample", None) is False:
        temperature = 0.0
    return tuple(until), max_gen, temperature


def cut_at_stops(text: str, until: tuple[str, ...]) -> str:
    """``text`` up to the first occurrence of any stop string."""
    cut = len(text)
    for u in until:
        if u:
            i = text.find(u)
            if i >= 0:
                cut = min(cut, i)
    return text[:cut]


def batches(requests: list[GenRequest], batch_size: int):
    """Index lists of requests that run together: same prompt length, gen length and temperature."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(requests):
        groups[(len(r.prompt), r.max_gen_toks, r.temperature)].append(i)
    for _, idx in sorted(groups.items()):
        for s in range(0, len(idx), batch_size):
            yield idx[s:s + batch_size]


@torch.no_grad()
def generate_tokens(lm, requests: list[GenRequest], generator: torch.Generator) -> list[list[int]]:
    """Generated token ids per request (``lm`` a :class:`~dlmlab.lmeval.DlmlabLM`), cut at the end token."""
    from dlmlab.sampling import DecodeConfig, generate, sample_ar

    out: list[list[int] | None] = [None] * len(requests)
    cfg = lm.cfg
    for idx in batches(requests, cfg.batch_size):
        r0 = requests[idx[0]]
        prompt = torch.tensor([requests[i].prompt for i in idx], dtype=torch.long, device=lm.device)
        n = r0.max_gen_toks
        if lm.is_diffusion:
            dc = DecodeConfig(steps=cfg.gen_steps or n, order=cfg.order, threshold=cfg.threshold,
                              block_len=cfg.block_len, kv_reuse=cfg.kv_reuse, temperature=r0.temperature,
                              noise=lm.run.noise if lm.run.noise is not None else "linear")
            toks = generate(lm.run.model, prompt, n, dc, generator, mask_id=lm.run.mask_id,
                            shift_logits=lm.run.shift_logits).tokens
        else:
            toks = sample_ar(lm.run.model, prompt, n, temperature=r0.temperature, generator=generator)
        for r, i in enumerate(idx):
            gen = toks[r, prompt.shape[1]:].tolist()
            if lm.eot_token_id is not None and lm.eot_token_id in gen:
                gen = gen[:gen.index(lm.eot_token_id)]
            out[i] = gen
    return out  # type: ignore[return-value]
