"""Checkpoints as safetensors + JSON, written atomically; never unpickled.

Layout: ``DIR/checkpoints/step_0000100/{model.safetensors, optimizer.safetensors, state.json}``
(plus ``model.json`` and ``tokenizer.json`` when the trainer knows them, so that a checkpoint folder
alone loads with :func:`dlmlab.load`) and ``DIR/checkpoints/latest.json`` ->
``{"step": 100, "path": "step_0000100"}``.

A checkpoint folder only ever appears complete: it is written as ``step_N.partial`` and renamed, and
one that is removed (pruned or replaced) is first renamed to ``step_N.deleting`` and only then
deleted, so a kill at any moment leaves no half checkpoint under a ``step_N`` name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Mapping

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_file, save_model

from dlmlab.errors import UserError
from dlmlab.files import atomic_write_text, strict_json

_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint is missing, incomplete, corrupt or does not match the model."""


def _io_error(e: Exception, path: Path) -> Exception:
    """safetensors reports I/O failures (a full disk) as SafetensorError '... (os error 28)': make it an OSError."""
    m = re.search(r"os error (\d+)", str(e))
    if m:
        code = int(m.group(1))
        return OSError(code, os.strerror(code), str(path))
    return e


def _save(write, path: Path) -> None:
    try:
        write()
    except SafetensorError as e:
        raise _io_error(e, path) from e


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
    _save(lambda: save_file(tensors, str(path)), path)
    return {"param_groups": sd["param_groups"], "scalars": scalars}


def _corrupt(path: Path, e: Exception) -> CheckpointError:
    detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return CheckpointError(f"{path} is corrupt or truncated ({detail}); {_fall_back(path.parent)}")


def _fall_back(ck: Path) -> str:
    """What to do about a bad checkpoint folder ``ck``: in a run's ``checkpoints/``, fall back to an earlier one
    (naming only files that exist); a checkpoint folder on its own has nothing to fall back to."""
    if ck.parent.name != "checkpoints":
        return (f"{ck} is a checkpoint folder on its own, with no earlier checkpoint beside it: copy it again from "
                "its source")
    latest = ck.parent / "latest.json"
    others = [p.name for _, p in list_checkpoints(ck.parent.parent) if p != ck]
    delete = f"{ck} and {latest}" if latest.is_file() else f"{ck}"
    earlier = f" ({others[-1]})" if others else " (there is none: training then starts over)"
    return (f"delete {delete} to fall back to the checkpoint before it{earlier}; `dlmlab train ... --no-resume` "
            "starts the run over instead")


def load_optimizer(opt: torch.optim.Optimizer, path: Path, meta: dict) -> None:
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"no {path.name} in {path.parent} (incomplete checkpoint); {_fall_back(path.parent)}")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise _corrupt(path, e) from None
    state: dict[int, dict] = {}
    try:
        for key, v in tensors.items():
            idx, k = key.split(".", 1)
            state.setdefault(int(idx), {})[k] = v
        for key, v in meta.get("scalars", {}).items():
            idx, k = key.split(".", 1)
            state.setdefault(int(idx), {})[k] = v
        opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"optimizer state in {path} does not match this model: {e}") from None


def _remove(path: Path) -> None:
    """Delete checkpoint folder ``path``: renamed out of the listed names first, then removed."""
    trash = path.with_name(f"{path.name}.deleting")
    if trash.exists():
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def remove_stale(root: Path) -> None:
    """Remove the ``step_N.partial`` / ``step_N.deleting`` folders under ``root/checkpoints`` that a kill
    mid-write or mid-delete left (training calls this when it starts or resumes, and before each save)."""
    ckdir = Path(root) / "checkpoints"
    if ckdir.is_dir():
        for stale in list(ckdir.glob("step_*.partial")) + list(ckdir.glob("step_*.deleting")):
            shutil.rmtree(stale, ignore_errors=True)


def save_checkpoint(root: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer | None,
                    state: dict, keep: int = 2, files: Mapping[str, str] | None = None) -> Path:
    """Write checkpoint ``step`` under ``root/checkpoints`` atomically and prune old ones.

    ``files``: more text files (name -> content) written into the checkpoint folder, e.g. ``model.json``.

    Pruning keeps the ``keep`` newest checkpoints up to ``step`` (this run's newest) and never touches
    a checkpoint of a later step (another run's, which ``--no-resume`` moves aside before training).
    When it removes any, one line on stderr names the kept and the removed ones (:func:`pruning_note`).
    """
    ckdir = Path(root) / "checkpoints"
    ckdir.mkdir(parents=True, exist_ok=True)
    remove_stale(root)
    name = f"step_{step:07d}"
    tmp = ckdir / (name + ".partial")
    tmp.mkdir()
    try:
        _save(lambda: save_model(model, str(tmp / "model.safetensors")), tmp / "model.safetensors")
        meta = dict(state, step=step)
        if opt is not None:
            meta["optimizer"] = save_optimizer(opt, tmp / "optimizer.safetensors")
        (tmp / "state.json").write_text(strict_json(meta, indent=1, default=str))
        for fname, text in (files or {}).items():
            (tmp / fname).write_text(text, encoding="utf-8")
        final = ckdir / name
        if final.exists():
            _remove(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(ckdir / "latest.json", json.dumps({"step": step, "path": name}))
    if keep:
        older = [p for s, p in list_checkpoints(root) if s <= step]
        removed = older[:-keep]
        for old in removed:
            _remove(old)
        if removed:
            _note(pruning_note(ckdir, [p.name for p in older[-keep:]], [p.name for p in removed], keep))
    return final


def pruning_note(ckdir: Path, kept: list[str], removed: list[str], keep: int) -> str:
    """The one line :func:`save_checkpoint` prints when pruning removes checkpoints."""
    return (f"checkpoints in {ckdir}: kept {', '.join(kept)}; removed {', '.join(removed)} "
            f"(train.keep_checkpoints = {keep}; 0 keeps all)")


def _note(line: str) -> None:
    """``line`` on stderr, above any progress bar (tqdm.write) rather than through it."""
    from tqdm.auto import tqdm

    tqdm.write(line, file=sys.stderr)


def _complete(path: Path) -> bool:
    return (path / "state.json").is_file() and (path / "model.safetensors").is_file()


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every complete checkpoint under ``root/checkpoints``, by step."""
    ckdir = Path(root) / "checkpoints"
    out = []
    if ckdir.is_dir():
        for p in ckdir.iterdir():
            m = _STEP_DIR.match(p.name)
            if m and p.is_dir() and _complete(p):
                out.append((int(m.group(1)), p))
    return sorted(out)


def latest_checkpoint(root: Path) -> Path | None:
    """The checkpoint ``latest.json`` names; without ``latest.json`` the newest complete one (or ``None``).

    (``latest.json`` is written right after a checkpoint is renamed into place, so a kill in between
    leaves a complete checkpoint that it does not name yet.)
    """
    ptr = Path(root) / "checkpoints" / "latest.json"
    if not ptr.exists():
        cks = list_checkpoints(root)
        return cks[-1][1] if cks else None
    cks = list_checkpoints(root)
    fallback = (f"; delete {ptr} to resume from the newest complete checkpoint ({cks[-1][1].name})" if cks
                else "; delete it to start over")
    try:
        info = json.loads(ptr.read_text())
        path = ptr.parent / info["path"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{ptr} is corrupt ({e}){fallback}") from None
    if not _complete(path):
        raise CheckpointError(f"{ptr} points to {path}, which is missing or incomplete{fallback}")
    return path


def _shape_mismatches(model: torch.nn.Module, shapes: dict[str, tuple]) -> list[str]:
    return [f"{k}: file {list(shapes[k])} vs model {list(v.shape)}" for k, v in model.state_dict().items()
            if k in shapes and tuple(shapes[k]) != tuple(v.shape)]


def _names(what: str, keys: list[str]) -> str:
    """``missing 2 weights (blocks.0.attn.W_q.weight, blocks.0.attn.W_k.weight)``: the count first, every name."""
    if not keys:
        return f"no {what} weights"
    return f"{what} {len(keys)} weight{'s' if len(keys) > 1 else ''} ({', '.join(keys)})"


def _check_family(path: Path, model: torch.nn.Module) -> None:
    """One sentence when the checkpoint's ``model.json`` names another model family than ``model``'s."""
    card = path / "model.json"
    mine = getattr(model, "family", None)
    if mine is None or not card.is_file():
        return
    try:
        theirs = json.loads(card.read_text(encoding="utf-8")).get("family")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(theirs, str) and theirs != mine:
        raise CheckpointError(f"{path} holds a {theirs} model, and this model is a {mine}: load it with "
                              f"dlmlab.load({str(path)!r}), which builds the model it holds")


def load_checkpoint(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer | None = None) -> dict:
    """Load weights (and optimizer) from checkpoint dir ``path``; returns its state.json."""
    path = Path(path)
    mfile = path / "model.safetensors"
    if not mfile.exists():
        raise CheckpointError(f"no model.safetensors in {path}")
    try:
        with safe_open(str(mfile), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError, RuntimeError, ValueError) as e:
        raise _corrupt(mfile, e) from None
    _check_family(path, model)
    bad = _shape_mismatches(model, shapes)
    if bad:
        raise CheckpointError(f"weights in {mfile} do not fit this model: {len(bad)} shape mismatch(es): "
                              + "; ".join(bad))
    try:
        missing, unexpected = load_model(model, str(mfile), strict=False)
    except (SafetensorError, OSError, ValueError) as e:
        raise _corrupt(mfile, e) from None
    except RuntimeError as e:
        raise CheckpointError(f"weights in {mfile} do not fit this model: {' '.join(str(e).split())}") from None
    if missing or unexpected:
        raise CheckpointError(f"weights in {mfile} do not fit this model: {_names('missing', sorted(missing))}, "
                              f"{_names('unexpected', sorted(unexpected))}")
    try:
        state = json.loads((path / "state.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path / 'state.json'} unreadable ({e}); {_fall_back(path)}") from None
    if opt is not None and "optimizer" in state:
        load_optimizer(opt, path / "optimizer.safetensors", state["optimizer"])
    return state
