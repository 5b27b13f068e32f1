"""Mamba-1 language model / tagger (pure PyTorch), layout as Hugging Face ``MambaModel``.

Block i (pre-norm residual)::

    resid_pre -> RMSNorm -> mixer -> + resid_pre -> resid_post
    mixer: x, z = in_proj(h).chunk(2)                       [B,T,Di] each
           u = silu(causal depthwise conv1d(x))   (or silu(x) with use_conv=False)
           dt, B, C = split(x_proj(u));  dt = softplus(dt_proj(dt))
           y = selective_scan(u, dt, A=-exp(A_log), B, C) + D * u
           out = out_proj(y * silu(z))

Hook points (:mod:`dlmlab.models.protocol`, family "mamba"): ``embed`` [B,T,D]; ``blocks.{i}.resid_pre`` /
``resid_post`` [B,T,D] (``resid_post = resid_pre + mixer_out``);
``blocks.{i}.mixer.conv_out`` [B,T,Di] (u, the SSM input after conv + silu);
``blocks.{i}.mixer.dt`` [B,T,Di]; ``blocks.{i}.mixer.ssm_out`` [B,T,Di] (y incl.
the D skip, before the gate);
``blocks.{i}.mixer_out`` [B,T,D]; ``final`` [B,T,D] (after the final RMSNorm);
``logits`` [B,T,n_out].  SSM states: :func:`ssm_states` (not a hook point: a hook
inside the scan could not change the output).  Weight names follow HF with ``layers`` -> ``blocks``,
``embeddings`` -> ``tok_emb``, ``norm_f`` -> ``ln_final`` (see hf_mamba.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from dlmlab.config import Config, Derived, is_auto, require
from dlmlab.interp.hooks import HookPoint
from dlmlab.models.stacked import SSMStack, ssm_states  # noqa: F401  (re-exported: one definition)
from dlmlab.models.fused_conv import conv_silu, reference_conv_silu
from dlmlab.models.fused_scan import fused_selective_scan
from dlmlab.models.selective_scan import selective_scan, selective_scan_ref


@dataclass
class MambaConfig(Config):
    """Shape of a :class:`Mamba`.  ``d_inner = 0`` -> ``int(expand * d_model)``;
    ``dt_rank = 0`` -> ``ceil(d_model / 16)`` (HF's "auto").  Checked when built; derived
    fields are re-derived by ``dataclasses.replace``."""

    vocab_size: int = 0
    n_out: int = 0  # 0 -> vocab_size
    d_model: int = 128
    n_layers: int = 4
    d_state: int = 16
    expand: float = 2.0
    d_inner: int = 0
    d_conv: int = 4
    dt_rank: int = 0
    use_conv: bool = True  # False removes the causal Conv1D (u = silu(x))
    conv_bias: bool = True
    bias: bool = False  # in_proj / out_proj bias
    norm_eps: float = 1e-5
    dt_min: float = 0.001
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    dt_scale: float = 1.0
    tie_embeddings: bool = True  # only when n_out == vocab_size
    scan: Literal["fused", "chunked", "sequential"] = "fused"  # see docs/models.md, "Selective scan"
    scan_chunk: int = 16
    init_std: float = 0.02  # embedding init

    def derive(self) -> None:
        if is_auto(self.d_inner):
            self.d_inner = Derived(int(self.expand * self.d_model)) if self.expand > 0 else 0
        if is_auto(self.dt_rank):
            self.dt_rank = Derived(math.ceil(self.d_model / 16)) if self.d_model > 0 else 0

    def validate(self) -> None:
        require(self.vocab_size > 0, f"model.vocab_size must be > 0, got {self.vocab_size}")
        require(self.n_out >= 0, f"model.n_out must be >= 0, got {self.n_out}")
        require(self.d_model > 0, f"model.d_model must be > 0, got {self.d_model}")
        require(self.n_layers >= 1, f"model.n_layers must be >= 1, got {self.n_layers}")
        require(self.d_state > 0, f"model.d_state must be > 0, got {self.d_state}")
        require(self.d_inner > 0, f"model.d_inner must be > 0 (or expand > 0), got {self.d_inner}")
        require(self.d_conv >= 1, f"model.d_conv must be >= 1, got {self.d_conv}")
        require(self.dt_rank > 0, f"model.dt_rank must be > 0, got {self.dt_rank}")
        require(self.norm_eps > 0, f"model.norm_eps must be > 0, got {self.norm_eps}")
        require(0 < self.dt_min <= self.dt_max, f"need 0 < dt_min <= dt_max, got {self.dt_min}, {self.dt_max}")
        require(self.dt_init_floor >= 0, f"model.dt_init_floor must be >= 0, got {self.dt_init_floor}")
        require(self.dt_scale > 0, f"model.dt_scale must be > 0, got {self.dt_scale}")
        require(self.scan_chunk >= 1, f"model.scan_chunk must be >= 1, got {self.scan_chunk}")
        require(self.init_std >= 0, f"model.init_std must be >= 0, got {self.init_std}")

    @property
    def family(self) -> str:
        """The model family (see :mod:`dlmlab.models.protocol`)."""
        return "mamba"

    @property
    def out_size(self) -> int:
        return self.n_out or self.vocab_size


class MambaMixer(nn.Module):
    """Selective SSM mixer: h [B,T,D] -> [B,T,D]."""

    def __init__(self, cfg: MambaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        Di, N, R = cfg.d_inner, cfg.d_state, cfg.dt_rank
        self.in_proj = nn.Linear(cfg.d_model, 2 * Di, bias=cfg.bias)
        self.conv1d = (
            nn.Conv1d(Di, Di, cfg.d_conv, groups=Di, padding=cfg.d_conv - 1, bias=cfg.conv_bias)
            if cfg.use_conv else None
        )
        self.x_proj = nn.Linear(Di, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, Di, bias=True)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(Di, 1))
        self.D = nn.Parameter(torch.ones(Di))
        self.out_proj = nn.Linear(Di, cfg.d_model, bias=cfg.bias)
        self.conv_out, self.dt, self.ssm_out = HookPoint(), HookPoint(), HookPoint()
        self.record_states = False  # set by ssm_states(); keeps the states of the last forward
        self.last_states: torch.Tensor | None = None
        self._init_dt()

    @torch.no_grad()
    def _init_dt(self) -> None:
        cfg = self.cfg
        std = cfg.dt_rank ** -0.5 * cfg.dt_scale
        nn.init.uniform_(self.dt_proj.weight, -std, std)
        lo, hi = math.log(cfg.dt_min), math.log(cfg.dt_max)
        dt = torch.exp(torch.rand(cfg.d_inner) * (hi - lo) + lo).clamp(min=cfg.dt_init_floor)
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        x, z = self.in_proj(h).chunk(2, dim=-1)
        if self.conv1d is None:
            u = F.silu(x)
        elif self.cfg.scan == "fused":
            u = conv_silu(x, self.conv1d)
        else:
            u = reference_conv_silu(x, self.conv1d)
        u = self.conv_out(u)
        dt, B, C = torch.split(self.x_proj(u), [self.cfg.dt_rank, self.cfg.d_state, self.cfg.d_state], dim=-1)
        dt = self.dt_proj(dt)
        A, D = -torch.exp(self.A_log.to(u.dtype)), self.D.to(u.dtype)
        if self.cfg.scan == "fused" and not (self.record_states or self.ssm_out.active or self.dt.active):
            # softplus, scan, D skip and gate in one kernel (the dt and ssm_out hook points live inside
            # it: with a hook on either, the path below)
            return self.out_proj(fused_selective_scan(u, dt, A, B, C, D=D, z=z, chunk=self.cfg.scan_chunk,
                                                      dt_softplus=True))
        dt = self.dt(F.softplus(dt))
        y = self.ssm_out(self._scan(u, dt, A, B, C) + u * D)
        return self.out_proj(y * F.silu(z))

    def _scan(self, u, dt, A, B, C) -> torch.Tensor:
        """y [B,T,Di] by the configured scan; the sequential reference when states are recorded."""
        if self.record_states or self.cfg.scan == "sequential":
            y, states = selective_scan_ref(u, dt, A, B, C, return_states=True)
            self.last_states = states if self.record_states else None
            return y
        if self.cfg.scan == "chunked":
            return selective_scan(u, dt, A, B, C, chunk=self.cfg.scan_chunk)
        # "fused": falls back to "chunked" with one warning when the C++ kernel cannot be built
        return fused_selective_scan(u, dt, A, B, C, chunk=self.cfg.scan_chunk)


class Mamba(SSMStack):
    """Embedding -> n_layers x (RMSNorm, MambaMixer) residual blocks -> RMSNorm -> linear head (tokens [B,T] -> logits [B,T,K])."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg, MambaMixer)

