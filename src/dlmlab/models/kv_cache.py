"""Key/value cache for incremental decoding and for reusing a prompt's keys/values."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class KVCache:
    """Per-layer keys/values, each [B, H, T_cached, d_head] (after RoPE).

    ``frozen=True`` makes the cache read-only: forwards attend to the cached
    prefix but do not append their own keys/values.  Diffusion sampling uses it
    to compute a prompt's keys/values once and reuse them at every denoising
    step (valid because the prompt never attends to the target).
    """

    layers: list[tuple[torch.Tensor, torch.Tensor] | None] = field(default_factory=list)
    frozen: bool = False

    @property
    def length(self) -> int:
        for entry in self.layers:
            if entry is not None:
                return entry[0].shape[2]
        return 0

    def get(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.layers[layer] if layer < len(self.layers) else None

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return keys/values to attend to (cached + new); store them unless frozen."""
        past = self.get(layer)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        if not self.frozen:
            while len(self.layers) <= layer:
                self.layers.append(None)
            self.layers[layer] = (k, v)
        return k, v

    def freeze(self) -> "KVCache":
        return KVCache(layers=list(self.layers), frozen=True)

    def expand(self, batch: int) -> "KVCache":
        """Repeat a batch-1 cache to ``batch`` rows."""
        layers = [None if e is None else (e[0].expand(batch, -1, -1, -1), e[1].expand(batch, -1, -1, -1)) for e in self.layers]
        return KVCache(layers=layers, frozen=self.frozen)
