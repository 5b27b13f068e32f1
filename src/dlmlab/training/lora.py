"""LoRA adapters (Hugging Face ``peft``) on the linear layers of a toolkit model.

:func:`add_lora` injects peft LoRA layers in place (``peft.inject_adapter_in_model``): each targeted
``nn.Linear`` (by default the attention projections ``W_q, W_k, W_v, W_o`` and the MLP ``fc_in,
fc_gate, fc_out`` of every block) becomes a peft ``lora.Linear`` computing
``y = W x + (alpha / r) * B A x`` with ``A`` [r, in] random and ``B`` [out, r] zero at the start, so the
model's outputs are unchanged until the first step.  Every other parameter is frozen, so only the
adapters train.  The model keeps its class, hook points and module names (a targeted layer's weight
moves to ``<name>.base_layer.weight``).

:func:`merge_lora` folds the adapters into the base weights and puts plain ``nn.Linear`` layers back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from dlmlab.config import Config, require
from dlmlab.errors import UserError

TARGETS = ("W_q", "W_k", "W_v", "W_o", "fc_in", "fc_gate", "fc_out")  # toolkit Transformer linear layers


@dataclass
class LoraSettings(Config):
    """Rank ``r``, scale ``alpha / r``, dropout on the adapter input, and which linear layers get adapters
    (names of the toolkit Transformer's attention / MLP ``nn.Linear`` modules)."""

    r: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    targets: list[str] = field(default_factory=lambda: list(TARGETS))

    def validate(self) -> None:
        require(self.r > 0, f"lora.r must be > 0, got {self.r}")
        require(self.alpha > 0, f"lora.alpha must be > 0, got {self.alpha}")
        require(0 <= self.dropout < 1, f"lora.dropout must be in [0, 1), got {self.dropout}")
        require(len(self.targets) > 0, "lora.targets must name at least one linear layer")
        bad = [t for t in self.targets if t not in TARGETS]
        require(not bad, f"lora.targets: unknown layer {bad[:1]}; choose from {list(TARGETS)}")


def is_adapter(name: str) -> bool:
    """True for a parameter name that belongs to a LoRA adapter."""
    return ".lora_A." in name or ".lora_B." in name


def add_lora(model: nn.Module, cfg: LoraSettings) -> nn.Module:
    """Inject LoRA adapters into ``model`` in place and freeze everything else; returns ``model``.

    Adapters are float32 whatever the base dtype (peft casts the adapter input and output)."""
    from peft import LoraConfig, inject_adapter_in_model

    if any(is_adapter(n) for n, _ in model.named_parameters()):
        raise UserError("the model already has LoRA adapters")
    present = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    targets = [t for t in cfg.targets if t in present]
    if not targets:
        raise UserError(f"lora.targets {cfg.targets} name no nn.Linear layer of this model")
    pc = LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets, bias="none")
    model = inject_adapter_in_model(pc, model)
    for name, p in model.named_parameters():
        p.requires_grad_(is_adapter(name))
        if is_adapter(name):
            p.data = p.data.float()
    return model


def adapter_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The LoRA adapter parameters by name (empty for a model without adapters)."""
    return {n: p for n, p in model.named_parameters() if is_adapter(n)}


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached CPU copies of the adapter weights (what a LoRA run needs to save)."""
    return {n: p.detach().cpu().clone() for n, p in adapter_parameters(model).items()}


@torch.no_grad()
def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight (``W += (alpha / r) B A``) and put the plain ``nn.Linear``
    back in place of each peft layer; returns ``model`` (no adapters left, every parameter trainable)."""
    from peft.tuners.lora import LoraLayer

    swaps = [(n, m) for n, m in model.named_modules() if isinstance(m, LoraLayer)]
    for name, layer in swaps:
        layer.merge()
        parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        setattr(parent, name.rsplit(".", 1)[-1], layer.get_base_layer())
    for p in model.parameters():
        p.requires_grad_(True)
    return model
