"""Mamba-2 (SSD) language model / tagger, layout as Hugging Face ``Mamba2Model``
(``n_groups`` B/C groups of N, G = n_groups; consecutive heads share a group).

Block i (pre-norm residual)::

    resid_pre -> RMSNorm -> mixer -> + resid_pre -> resid_post
    mixer: z, xBC, dt = split(in_proj(h), [Di, Di + 2GN, H])
           xBC = silu(causal depthwise conv1d(xBC))   (silu(xBC) with use_conv=False)
           x, B, C = split(xBC, [Di, GN, GN]);  dt = softplus(dt + dt_bias)
           y = ssd_scan(x as [B,T,H,P], dt, A=-exp(A_log), B, C as [B,T,G,N]) + D[h] * x
           out = out_proj(RMSNorm_gated(y, z))       # rmsnorm(y * silu(z)) * weight, per group of Di/G

``scan``: ``"fused"`` (default) runs conv + silu, the SSD scan with its D skip and the gated norm
as C++ kernels (:mod:`~dlmlab.models.fused_conv`, :mod:`~dlmlab.models.ssd_fused`,
:mod:`~dlmlab.models.fused_gated_norm`; each falls back to the PyTorch ops when it cannot be
built); ``"chunked"`` is the pure-PyTorch chunked SSD (:func:`~dlmlab.models.ssd.ssd_scan`) with
PyTorch conv and norm, ``"sequential"`` the step-by-step reference.  They agree up to rounding.

Hook points (:mod:`dlmlab.models.protocol`, family "mamba2"): ``embed``; ``blocks.{i}.resid_pre`` /
``resid_post`` [B,T,D] (``resid_post = resid_pre + mixer_out``);
``blocks.{i}.mixer.conv_out`` [B,T,Di+2GN] (x, B, C after conv + silu);
``blocks.{i}.mixer.dt`` [B,T,H]; ``blocks.{i}.mixer.ssm_out`` [B,T,Di] (y incl. D
skip, before the gated norm);
``blocks.{i}.mixer_out`` [B,T,D]; ``final`` [B,T,D] (after the final RMSNorm);
``logits``.  SSM states: :func:`ssm_states` (not a hook point).
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
from dlmlab.models.precision import upcast
from dlmlab.models.stacked import SSMStack, ssm_states  # noqa: F401  (re-exported: one definition)
from dlmlab.models.fused_conv import conv_silu
from dlmlab.models.fused_gated_norm import gated_norm
from dlmlab.models.ssd import ssd_scan, ssd_scan_ref
from dlmlab.models.ssd_fused import fused_ssd_scan


@dataclass
class Mamba2Config(Config):
    """Shape of a :class:`Mamba2`.  ``d_inner = 0`` -> ``int(expand * d_model)``; heads = d_inner / headdim.
    Checked when built; ``d_inner`` left at 0 is re-derived by ``dataclasses.replace``."""

    vocab_size: int = 0
    n_out: int = 0  # 0 -> vocab_size
    d_model: int = 128
    n_layers: int = 4
    d_state: int = 64
    expand: float = 2.0
    d_inner: int = 0
    headdim: int = 32
    n_groups: int = 1  # B/C groups (heads must be a multiple)
    d_conv: int = 4
    use_conv: bool = True
    conv_bias: bool = True
    bias: bool = False
    norm_eps: float = 1e-5
    dt_min: float = 0.001
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    A_init_max: float = 16.0  # A_log initialised from log U(1, A_init_max) per head
    tie_embeddings: bool = True  # only when n_out == vocab_size
    scan: Literal["fused", "chunked", "sequential"] = "fused"  # fused: C++ kernel (ssd_fused), else ssd.py
    scan_chunk: int = 64  # chunk length of "chunked"; checkpoint interval of "fused"
    init_std: float = 0.02

    def derive(self) -> None:
        if is_auto(self.d_inner):
            self.d_inner = Derived(int(self.expand * self.d_model)) if self.expand > 0 else 0

    def validate(self) -> None:
        require(self.vocab_size > 0, f"model.vocab_size must be > 0, got {self.vocab_size}")
        require(self.n_out >= 0, f"model.n_out must be >= 0, got {self.n_out}")
        require(self.d_model > 0, f"model.d_model must be > 0, got {self.d_model}")
        require(self.n_layers >= 1, f"model.n_layers must be >= 1, got {self.n_layers}")
        require(self.d_state > 0, f"model.d_state must be > 0, got {self.d_state}")
        require(self.d_inner > 0, f"model.d_inner must be > 0 (or expand > 0), got {self.d_inner}")
        require(self.headdim > 0, f"model.headdim must be > 0, got {self.headdim}")
        require(
            self.d_inner % self.headdim == 0,
            f"model.d_inner ({self.d_inner}) must be a multiple of model.headdim ({self.headdim})",
        )
        require(self.n_groups >= 1 and self.n_heads % self.n_groups == 0,
                f"model.n_groups ({self.n_groups}) must be >= 1 and divide the number of heads ({self.n_heads})")
        require(self.d_conv >= 1, f"model.d_conv must be >= 1, got {self.d_conv}")
        require(self.norm_eps > 0, f"model.norm_eps must be > 0, got {self.norm_eps}")
        require(0 < self.dt_min <= self.dt_max, f"need 0 < dt_min <= dt_max, got {self.dt_min}, {self.dt_max}")
        require(self.dt_init_floor >= 0, f"model.dt_init_floor must be >= 0, got {self.dt_init_floor}")
        require(self.A_init_max >= 1, f"model.A_init_max must be >= 1, got {self.A_init_max}")
        require(self.scan_chunk >= 1, f"model.scan_chunk must be >= 1, got {self.scan_chunk}")
        require(self.init_std >= 0, f"model.init_std must be >= 0, got {self.init_std}")

    @property
    def n_heads(self) -> int:
        return self.d_inner // self.headdim

    @property
    def family(self) -> str:
        """The model family (see :mod:`dlmlab.models.protocol`)."""
        return "mamba2"

    @property
    def out_size(self) -> int:
        return self.n_out or self.vocab_size


class GatedRMSNorm(nn.Module):
    """``weight * rmsnorm(y * silu(z))`` over groups of ``group_size`` of the last dim (HF ``MambaRMSNormGated``).

    Computed in float32 for half-precision inputs, in the input's dtype otherwise (float64 stays float64).
    """

    def __init__(self, d: int, eps: float, group_size: int = 0) -> None:
        super().__init__()
        self.eps = eps
        self.group_size = group_size or d
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, y: torch.Tensor, z: torch.Tensor, fused: bool = False) -> torch.Tensor:
        """``fused``: one C++ pass forward and backward (:mod:`dlmlab.models.fused_gated_norm`) for float32/64."""
        dtype = y.dtype
        if fused and dtype in (torch.float32, torch.float64) and z.dtype == dtype == self.weight.dtype:
            return gated_norm(y, z, self.weight, self.group_size, self.eps)
        h = upcast(y) * F.silu(upcast(z))
        h = h.unflatten(-1, (-1, self.group_size))  # [..., groups, group_size]
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2)
        return self.weight * h.to(dtype)


class Mamba2Mixer(nn.Module):
    def __init__(self, cfg: Mamba2Config) -> None:
        super().__init__()
        self.cfg = cfg
        Di, N, H, G = cfg.d_inner, cfg.d_state, cfg.n_heads, cfg.n_groups
        conv_dim = Di + 2 * G * N
        self.in_proj = nn.Linear(cfg.d_model, Di + conv_dim + H, bias=cfg.bias)
        self.conv1d = (
            nn.Conv1d(conv_dim, conv_dim, cfg.d_conv, groups=conv_dim, padding=cfg.d_conv - 1, bias=cfg.conv_bias)
            if cfg.use_conv else None
        )
        self.dt_bias = nn.Parameter(torch.empty(H))
        self.A_log = nn.Parameter(torch.empty(H))
        self.D = nn.Parameter(torch.ones(H))
        self.norm = GatedRMSNorm(Di, cfg.norm_eps, group_size=Di // G)
        self.out_proj = nn.Linear(Di, cfg.d_model, bias=cfg.bias)
        self.conv_out, self.dt, self.ssm_out = HookPoint(), HookPoint(), HookPoint()
        self.record_states = False  # set by ssm_states(); keeps the states of the last forward
        self.last_states: torch.Tensor | None = None
        self._init_ssm()

    @torch.no_grad()
    def _init_ssm(self) -> None:
        cfg, H = self.cfg, self.cfg.n_heads
        self.A_log.copy_(torch.log(torch.empty(H).uniform_(1, cfg.A_init_max)))
        lo, hi = math.log(cfg.dt_min), math.log(cfg.dt_max)
        dt = torch.exp(torch.rand(H) * (hi - lo) + lo).clamp(min=cfg.dt_init_floor)
        self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        Bsz, T, _ = h.shape
        Di, N, H, G = cfg.d_inner, cfg.d_state, cfg.n_heads, cfg.n_groups
        z, xBC, dt = torch.split(self.in_proj(h), [Di, Di + 2 * G * N, H], dim=-1)
        if self.conv1d is not None and cfg.scan == "fused":
            xBC = self.conv_out(conv_silu(xBC, self.conv1d))  # C++ kernel on the [B,T,C] layout
        elif self.conv1d is not None:
            xBC = self.conv_out(F.silu(self.conv1d(xBC.transpose(1, 2))[..., :T].transpose(1, 2)))
        else:
            xBC = self.conv_out(F.silu(xBC))
        x, B, C = torch.split(xBC, [Di, G * N, G * N], dim=-1)
        B, C = B.unflatten(-1, (G, N)), C.unflatten(-1, (G, N))
        dt = self.dt(F.softplus(dt + self.dt_bias))
        A = -torch.exp(self.A_log.to(x.dtype))
        xh = x.reshape(Bsz, T, H, cfg.headdim)
        if self.record_states or cfg.scan == "sequential":
            y, states = ssd_scan_ref(xh, dt, A, B, C, return_states=True)
            self.last_states = states if self.record_states else None
        elif cfg.scan == "fused":  # D skip inside the kernel
            y = fused_ssd_scan(xh, dt, A, B, C, D=self.D.to(x.dtype), chunk=cfg.scan_chunk)
        else:
            y = ssd_scan(xh, dt, A, B, C, chunk=cfg.scan_chunk)
        if self.record_states or cfg.scan != "fused":
            y = y + xh * self.D.to(x.dtype)[:, None]
        y = self.ssm_out(y.reshape(Bsz, T, Di))
        return self.out_proj(self.norm(y, z, fused=cfg.scan == "fused"))


class Mamba2(SSMStack):
    """Embedding -> n_layers x (RMSNorm, Mamba2Mixer) residual blocks -> RMSNorm -> linear head (tokens [B,T] -> logits [B,T,K])."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg, Mamba2Mixer)

