"""Checkpoints as safetensors + JSON, written atomically; never unpickled.

Layout: ``DIR/checkpoints/step_0000100/{model.safetensors, optimizer.safetensors, state.json}``
and ``DIR/checkpoints/latest.json`` -> ``{"step": 100, "path": "step_0000100"}``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from dlmlab.files import atomic_write_text
from dlmlab.errors import UserError


class CheckpointError(UserError, RuntimeError):
    """A checkpoint is missing, incomplete or does not match the model."""


def save_optimizer(opt: torch.optim.Optimizer, path: Path) -> dict:
    """Tensors to ``path`` (safetensors); returns the JSON-able rest (param groups, scalar state)."""
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"{idx}.{k}"] = v.detach().contiguous().clone()
            else:
                scalars[f"{idx}.{k}"] = v
    save_file(tensors, str(path))
    return {"param_groups": sd["param_groups"], "scalars": scalars}


def load_optimizer(opt: torch.optim.Optimizer, path: Path, meta: dict) -> None:
    tensors = load_file(str(path))
    state: dict[int, dict] = {}
    for key, v in tensors.items():
        idx, k = key.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    for key, v in meta.get("scalars", {}).items():
        idx, k = key.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    try:
        opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"optimizer state in {path} does not match this model: {e}") from None


def save_checkpoint(root: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer | None,
                    state: dict, keep: int = 2) -> Path:
    """Write checkpoint ``step`` under ``root/checkpoints`` atomically and prune old ones."""
    ckdir = Path(root) / "checkpoints"
    ckdir.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:07d}"
    tmp = ckdir / (name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    meta = dict(state, step=step)
    if opt is not None:
        meta["optimizer"] = save_optimizer(opt, tmp / "optimizer.safetensors")
    (tmp / "state.json").write_text(json.dumps(meta, indent=1, default=str))
    final = ckdir / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    atomic_write_text(ckdir / "latest.json", json.dumps({"step": step, "path": name}))
    if keep:
        steps = sorted(p for p in ckdir.glob("step_*") if p.is_dir() and not p.name.endswith(".partial"))
        for old in steps[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    ckdir = Path(root) / "checkpoints"
    out = []
    for p in sorted(ckdir.glob("step_*")):
        if p.is_dir() and not p.name.endswith(".partial") and (p / "state.json").exists():
            out.append((int(p.name.split("_")[1]), p))
    return out


def latest_checkpoint(root: Path) -> Path | None:
    ptr = Path(root) / "checkpoints" / "latest.json"
    if not ptr.exists():
        return None
    try:
        info = json.loads(ptr.read_text())
        path = ptr.parent / info["path"]
    except (json.JSONDecodeError, KeyError) as e:
        raise CheckpointError(f"{ptr} is corrupt ({e}); delete it to start over") from None
    if not (path / "state.json").exists():
        raise CheckpointError(f"{ptr} points to {path}, which is missing or incomplete")
    return path


def load_checkpoint(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer | None = None) -> dict:
    """Load weights (and optimizer) from checkpoint dir ``path``; returns its state.json."""
    path = Path(path)
    mfile = path / "model.safetensors"
    if not mfile.exists():
        raise CheckpointError(f"no model.safetensors in {path}")
    try:
        missing, unexpected = load_model(model, str(mfile), strict=False)
    except RuntimeError as e:
        raise CheckpointError(f"weights in {mfile} do not fit this model: {str(e).splitlines()[0]}") from None
    if missing or unexpected:
        raise CheckpointError(f"weights in {mfile} do not fit this model: missing {list(missing)[:5]}, unexpected {list(unexpected)[:5]}")
    try:
        state = json.loads((path / "state.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path / 'state.json'} unreadable: {e}") from None
    if opt is not None and "optimizer" in state:
        load_optimizer(opt, path / "optimizer.safetensors", state["optimizer"])
    return state
