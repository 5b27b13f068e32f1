"""Read a local Hugging Face model folder: ``config.json`` and the weights, never executing code.

One reader for every loader (GPT-2, Llama / Mistral / Qwen2, Mamba / Mamba-2, LLaDA, Dream):

* :func:`read_config` -> the ``config.json`` dict (clear errors for a missing folder, a missing
  or invalid file);
* :func:`read_weights` -> ``{name: tensor}`` from ``model.safetensors``, a sharded
  ``model.safetensors.index.json``, any other ``*.safetensors`` files, or ``pytorch_model.bin``
  (single or sharded ``pytorch_model.bin.index.json``), the latter through
  ``torch.load(weights_only=True)``: PyTorch's restricted unpickler, which rebuilds tensors and
  plain containers only and runs no code from the file;
* :func:`read_generation_config` -> ``generation_config.json`` or ``{}``;
* :func:`tokenizer_path` -> the folder when it holds tokenizer files, else ``None``.

Nothing is downloaded; ``trust_remote_code`` is never involved (no Python file from the folder is
imported).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dlmlab.errors import UserError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class HFFormatError(UserError, ValueError):
    """A model folder whose files or contents the toolkit cannot read; the message says why."""


class HFFileMissing(UserError, FileNotFoundError):
    """A model folder, or a file every model folder needs, is missing."""


def _read_json(f: Path) -> dict:
    try:
        raw = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise HFFormatError(f"{f} is not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise HFFormatError(f"{f} holds a JSON {type(raw).__name__}, expected an object")
    return raw


def read_config(path: str | Path) -> dict:
    """``config.json`` of the local model folder ``path`` as a dict."""
    path = Path(path)
    if not path.exists():
        raise HFFileMissing(f"model folder not found: {path}")
    if not path.is_dir():
        raise HFFormatError(f"{path} is not a folder (expected a Hugging Face model folder with config.json)")
    f = path / "config.json"
    if not f.exists():
        raise HFFileMissing(f"no config.json in {path}: not a Hugging Face model folder (save_pretrained writes one)")
    return _read_json(f)


def read_generation_config(path: str | Path) -> dict:
    """``generation_config.json`` of ``path`` as a dict, ``{}`` when the folder has none."""
    f = Path(path) / "generation_config.json"
    return _read_json(f) if f.exists() else {}


def tokenizer_path(path: str | Path) -> str | None:
    """``str(path)`` when the folder holds tokenizer files (``tokenizer.json`` & co.), else ``None``."""
    path = Path(path)
    return str(path) if any((path / n).exists() for n in TOKENIZER_FILES) else None


def _load_safetensors(files: list[Path]) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def _load_bins(files: list[Path]) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            part = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:  # the restricted unpickler refuses anything but tensors and containers
            raise HFFormatError(f"{f} could not be read as plain tensors ({type(e).__name__}); "
                                "convert it to safetensors once with save_pretrained(..., safe_serialization=True)") from None
        if not isinstance(part, dict):
            raise HFFormatError(f"{f} holds a {type(part).__name__}, expected a state dict")
        state.update(part)
    return state


def _shards(path: Path, index: Path) -> list[Path]:
    names = sorted(set(_read_json(index).get("weight_map", {}).values()))
    if not names:
        raise HFFormatError(f"{index} has no weight_map")
    missing = [n for n in names if not (path / n).exists()]
    if missing:
        raise HFFileMissing(f"{index} names shard files that are missing: {missing[:3]}")
    return [path / n for n in names]


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """All weights of the local model folder ``path`` (see the module docstring for the formats)."""
    path = Path(path)
    if (path / "model.safetensors").exists():
        return _load_safetensors([path / "model.safetensors"])
    if (path / "model.safetensors.index.json").exists():
        return _load_safetensors(_shards(path, path / "model.safetensors.index.json"))
    loose = sorted(path.glob("*.safetensors"))
    if loose:
        return _load_safetensors(loose)
    if (path / "pytorch_model.bin").exists():
        return _load_bins([path / "pytorch_model.bin"])
    if (path / "pytorch_model.bin.index.json").exists():
        return _load_bins(_shards(path, path / "pytorch_model.bin.index.json"))
    raise HFFileMissing(f"no weights in {path}: expected model.safetensors, model.safetensors.index.json "
                        "or pytorch_model.bin")


def mask_token_id(path: str | Path, hf: dict, default: int | None, vocab_size: int, what: str) -> int:
    """The mask token of a masked-diffusion checkpoint: ``mask_token_id`` from config.json, else from
    generation_config.json, else the family's published ``default``; it must be a valid token id."""
    mid = hf.get("mask_token_id")
    if mid is None:
        mid = read_generation_config(path).get("mask_token_id")
    if mid is None:
        mid = default
    if mid is None or not 0 <= int(mid) < vocab_size:
        raise HFFormatError(f"{path}: the {what} mask token id {mid!r} is not a token id of its vocabulary of "
                            f"{vocab_size}; set mask_token_id in config.json")
    return int(mid)
