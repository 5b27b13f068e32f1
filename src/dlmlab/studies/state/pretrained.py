"""Pretrained scale: the same probes / ablations / patching on a Hugging Face checkpoint.

:class:`HFTagger` wraps a local Hugging Face base model (Pythia = ``GPTNeoXModel``,
``MambaModel``, or any model whose decoder layers sit in a ``layers`` / ``h`` /
``blocks`` ``ModuleList``) plus a linear tagging head, and exposes the toolkit hook
points ``embed``, ``blocks.{i}.resid_post``, ``final`` and ``logits``.  The hook points
are driven by PyTorch forward hooks on the HF modules, so caching, replacing and
patching work exactly as on toolkit models (and the generic analyses apply unchanged).

:func:`run_pretrained` loads a checkpoint from a LOCAL path (never a hub download),
fine-tunes it on a task with the toolkit training loop, and analyses it.
Task token ids ``0..V-1`` are fed as the checkpoint's token ids ``0..V-1``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from dlmlab.hooks import HookedModule, HookPoint


class _Taps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.resid_post = HookPoint()


def _layer_list(base: nn.Module) -> nn.ModuleList:
    for name in ("layers", "h", "blocks"):
        mod = getattr(base, name, None)
        if isinstance(mod, nn.ModuleList) and len(mod):
            return mod
    raise ValueError(f"cannot find the decoder layers of {type(base).__name__} (looked for layers / h / blocks)")


class HFTagger(HookedModule):
    """HF base model + ``nn.Linear(hidden, n_out)``: tokens [B,T] -> logits [B,T,n_out]."""

    def __init__(self, base: nn.Module, n_out: int) -> None:
        super().__init__()
        if n_out <= 0:
            raise ValueError(f"n_out must be > 0, got {n_out}")
        self.base = base
        hidden = base.config.hidden_size
        self.vocab_size = base.get_input_embeddings().num_embeddings
        self.head = nn.Linear(hidden, n_out)
        layers = _layer_list(base)
        self.embed, self.final, self.logits = HookPoint(), HookPoint(), HookPoint()
        self.blocks = nn.ModuleList([_Taps() for _ in layers])
        base.get_input_embeddings().register_forward_hook(lambda m, i, o: self.embed(o))
        for layer, taps in zip(layers, self.blocks):
            layer.register_forward_hook(self._layer_hook(taps.resid_post))
        self.setup_hooks()

    @staticmethod
    def _layer_hook(hp: HookPoint):
        def fn(module, inputs, output):
            if isinstance(output, tuple):
                return (hp(output[0]), *output[1:])
            return hp(output)

        return fn

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be an integer [batch, seq] tensor, got {tokens.dtype} {tuple(tokens.shape)}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"token ids must be in [0, {self.vocab_size}) for this checkpoint")
        h = self.base(input_ids=tokens, use_cache=False).last_hidden_state
        return self.logits(self.head(self.final(h)))


def load_local(path: str | Path, n_out: int, dtype: torch.dtype = torch.float32) -> HFTagger:
    """Load a base model from a local directory (``local_files_only``) and wrap it."""
    from transformers import AutoModel

    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"no Hugging Face checkpoint (config.json) at {path}")
    base = AutoModel.from_pretrained(str(path), local_files_only=True, dtype=dtype)
    return HFTagger(base, n_out)


def run_pretrained(path: str | Path, task_name: str, p, progress: bool = True) -> dict:
    """Fine-tune the checkpoint at ``path`` on ``task_name`` (``p.pretrained_steps`` steps), then analyse."""
    from dlmlab.models.factory import count_params
    from dlmlab.analysis.direction_ablation import tagging_accuracy
    from dlmlab.studies.state.cells import analyse_model, eval_data, make_task, train_on_task

    task = make_task(task_name, p)
    torch.manual_seed(p.seed)
    model = load_local(path, task.n_classes)
    if task.vocab_size > model.vocab_size:
        raise ValueError(f"task {task_name} needs {task.vocab_size} token ids; checkpoint {path} has {model.vocab_size}")
    data = eval_data(task, p)
    train_on_task(model, task, p, progress, desc=f"{Path(path).name}/{task_name}", steps=p.pretrained_steps)
    res = {"path": str(path), "task": task_name, "params": count_params(model),
           "acc_by_len": {L: tagging_accuracy(model, x, y) for L, (x, y) in data.by_len.items()}}
    res.update(analyse_model(model, data, p))
    res["probe_accuracy"] = [pr["accuracy"] for pr in res["probes"]]
    drops = [v["drop"] for v in res["ablation"]["probe_dir"].values()]
    res["probe_dir_drop"] = sum(drops) / len(drops)
    return res
