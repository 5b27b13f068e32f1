"""Zero / mean ablation of attention heads (``blocks.{i}.attn.z``) or of whole token mixers
(``blocks.{i}.mixer_out``).

Ablating a head replaces its pattern-weighted values ``z`` [B, T, H, d_head] (hence its
output ``z @ W_O[h]``) by zero or by its mean over a reference batch.  Works on any toolkit
model whose attention exposes ``z`` (Transformer; the shared output bias is kept); any other model
raises :class:`~dlmlab.analysis.requires.UnsupportedModel`.

    means = head_means(model, ref_tokens)                  # {layer: [T, H, d_head]}
    with ablate_heads(model, [(1, 0)], "mean", means):
        acc = metric(model)
    base, drop = ablation_effects(model, metric, "mean", means)   # drop [L, H] = base - ablated

Ablating a mixer replaces a block's ``mixer_out`` [B, T, D] (attention, SSM mixer or LSTM / GRU
layer output; :mod:`dlmlab.models.protocol`) the same way, on every model family:

    means = mixer_means(model, ref_tokens)                 # {layer: [T, D]}
    with ablate_mixers(model, [1], "mean", means):
        acc = metric(model)
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator

import torch

from dlmlab.analysis.heads import model_device, row_chunks
from dlmlab.analysis.requires import LayerOutOfRange, require_attention, require_residual
from dlmlab.models.precision import upcast

ABLATIONS = ("zero", "mean")


def _n_layers(model) -> int:
    return len(model.blocks)


@torch.no_grad()
def head_means(model, tokens: torch.Tensor, per_position: bool = True, chunk: int = 64,
               **forward_kwargs) -> dict[int, torch.Tensor]:
    """Mean ``z`` of every head over the batch (and positions unless ``per_position``), on the CPU.

    Returns {layer: [T, H, d_head]} (per position) or {layer: [H, d_head]}.
    """
    require_attention(model, "head_means", points=("z",))
    return _point_means(model, tokens, "blocks.*.attn.z", per_position, chunk, forward_kwargs)


def _point_means(model, tokens: torch.Tensor, glob: str, per_position: bool, chunk: int,
                 forward_kwargs: dict) -> dict[int, torch.Tensor]:
    """{layer: mean activation at the points ``glob`` matches ([T, ...] per position, else [...])}, CPU."""
    sums: dict[int, torch.Tensor] = {}
    dev = model_device(model)
    for sl in row_chunks(tokens.shape[0], chunk):
        with model.cache(glob) as c:
            model(tokens[sl].to(dev), **forward_kwargs)
        for name, z in c.items():
            layer = int(name.split(".")[1])
            sums[layer] = sums.get(layer, 0.0) + upcast(z).sum(0).cpu()  # float64 models keep float64
    B = tokens.shape[0]
    return {layer: (s / B if per_position else s.mean(0) / B) for layer, s in sums.items()}


@torch.no_grad()
def mixer_means(model, tokens: torch.Tensor, per_position: bool = True, chunk: int = 64,
                **forward_kwargs) -> dict[int, torch.Tensor]:
    """Mean ``blocks.{i}.mixer_out`` over the batch (and positions unless ``per_position``), on the CPU.

    Any model family.  Returns {layer: [T, D]} (per position) or {layer: [D]}.
    """
    require_residual(model, "mixer_means")
    return _point_means(model, tokens, "blocks.*.mixer_out", per_position, chunk, forward_kwargs)


@contextlib.contextmanager
def ablate_mixers(model, layers: Iterable[int], kind: str = "zero",
                  means: dict[int, torch.Tensor] | None = None) -> Iterator[None]:
    """Within the block, the token mixer of each listed layer is zero- or mean-ablated: its
    ``mixer_out`` [B, T, D] is replaced by zeros or by ``means[layer]`` ([T, D] or [D],
    :func:`mixer_means`).  Any model family."""
    require_residual(model, "ablate_mixers")
    if kind not in ABLATIONS:
        raise ValueError(f"ablation kind must be one of {ABLATIONS}, got {kind!r}")
    if kind == "mean" and means is None:
        raise ValueError("mean ablation needs means=mixer_means(model, reference_tokens)")
    L = _n_layers(model)
    layers = sorted(set(int(i) for i in layers))
    for layer in layers:
        if not 0 <= layer < L:
            raise LayerOutOfRange(f"layer {layer} out of range for a model with {L} layers")

    def make(layer: int) -> Callable:
        def fn(x: torch.Tensor, hp) -> torch.Tensor:
            if kind == "zero":
                return torch.zeros_like(x)
            m = means[layer].to(device=x.device, dtype=x.dtype)
            if m.dim() == 2:  # per position [T, D]
                if m.shape[0] < x.shape[1]:
                    raise ValueError(f"per-position means cover {m.shape[0]} positions, input has {x.shape[1]}")
                m = m[: x.shape[1]]
            return m.expand_as(x).clone()

        return fn

    with model.hooks({f"blocks.{layer}.mixer_out": make(layer) for layer in layers}):
        yield


@contextlib.contextmanager
def ablate_heads(model, heads: Iterable[tuple[int, int]], kind: str = "zero",
                 means: dict[int, torch.Tensor] | None = None) -> Iterator[None]:
    """Within the block, the listed (layer, head) pairs are zero- or mean-ablated."""
    require_attention(model, "ablate_heads", points=("z",))
    if kind not in ABLATIONS:
        raise ValueError(f"ablation kind must be one of {ABLATIONS}, got {kind!r}")
    if kind == "mean" and means is None:
        raise ValueError("mean ablation needs means=head_means(model, reference_tokens)")
    L = _n_layers(model)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        H = model.blocks[layer].attn.n_heads if 0 <= layer < L else 0
        if not (0 <= layer < L and 0 <= head < H):
            raise ValueError(f"no head ({layer}, {head}) in a model with {L} layers of {H or '?'} heads")
        by_layer.setdefault(layer, []).append(head)

    def make(layer: int, hs: list[int]) -> Callable:
        def fn(z: torch.Tensor, hp) -> torch.Tensor:
            z = z.clone()
            if kind == "zero":
                z[:, :, hs] = 0.0
            else:
                m = means[layer].to(device=z.device, dtype=z.dtype)
                if m.dim() == 3:  # per position [T, H, dh]
                    if m.shape[0] < z.shape[1]:
                        raise ValueError(f"per-position means cover {m.shape[0]} positions, input has {z.shape[1]}")
                    z[:, :, hs] = m[: z.shape[1], hs][None].expand(z.shape[0], -1, -1, -1)
                else:
                    z[:, :, hs] = m[hs]
            return z

        return fn

    with model.hooks({f"blocks.{layer}.attn.z": make(layer, hs) for layer, hs in by_layer.items()}):
        yield


@torch.no_grad()
def ablation_effects(model, metric: Callable[[object], float], kind: str = "mean",
                     means: dict[int, torch.Tensor] | None = None) -> tuple[float, torch.Tensor]:
    """(metric without ablation, drop [L, H] (float64) = base - metric with that single head ablated)."""
    require_attention(model, "ablation_effects", points=("z",))
    base = float(metric(model))
    L = _n_layers(model)
    H = model.blocks[0].attn.n_heads
    drop = torch.zeros(L, H, dtype=torch.float64)  # metric values are Python floats
    for layer in range(L):
        for head in range(H):
            with ablate_heads(model, [(layer, head)], kind, means):
                drop[layer, head] = base - float(metric(model))
    return base, drop
