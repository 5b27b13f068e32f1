"""Small pretrained checkpoints for the state study's pretrained-scale part, on every machine.

Without local Pythia / Mamba checkpoints, :func:`pretrain_small_models` pretrains a small
GPT-NeoX (the Pythia architecture, ``GPTNeoXForCausalLM``: rotary on a quarter of each head,
parallel residual, untied unembedding) and a small Mamba (``MambaForCausalLM``) language model
on offline text (Tiny Shakespeare / WikiText-2 through :mod:`dlmlab.data`), then saves each
with ``save_pretrained`` (``config.json`` + safetensors) so the study loads them through the
same local-path loader as real checkpoints (:func:`dlmlab.models.hf_hooked.load_hf_hooked`).

Tokens are UTF-8 bytes (vocabulary 256, id = byte value), so any task vocabulary up to 256
ids (the state tasks use ``0..V-1`` with V <= 100) maps onto pretrained embeddings.
Training: the toolkit loop (AdamW, warmup + cosine, gradient clipping), next-byte
cross-entropy on random windows of the first ``1 - val_fraction`` of the text, one torch
thread, deterministic from the seed.  Each folder holds ``dlmlab_pretrain.json`` (recipe,
seed, logged train losses, held-out loss in nats and bits per byte); a folder whose record matches
the recipe and seed is reused (resume-friendly), one from another recipe or seed is retrained.
Folders appear whole (written aside, then renamed).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch

from dlmlab.config import Config, ConfigError, read_text, require
from dlmlab.data.paths import DataError, resolve_text
from dlmlab.errors import UserError
from dlmlab.files import atomic_write_text
from dlmlab.objectives import ARObjective
from dlmlab.studies.threads import STUDY_THREADS, torch_threads

NEXT_BYTE = ARObjective(float32=True)  # next-byte cross-entropy on float32 logits (training and held-out loss)

BYTE_VOCAB = 256
RECORD = "dlmlab_pretrain.json"
ARCHS = ("gpt_neox", "mamba")


@dataclass
class PretrainRecipe(Config):
    """Sizes and budget of the small pretrained models (one recipe for both architectures).

    GPT-NeoX: ``d_model`` wide, ``n_layers`` layers, ``n_heads`` heads, MLP ``4 d_model``.
    Mamba: ``d_model`` wide, ``n_layers`` blocks, inner width ``expand * d_model``, state
    ``d_state``.  Both train ``steps`` steps of ``batch_size`` windows of ``seq_len`` bytes.
    """

    archs: list[Literal["gpt_neox", "mamba"]] = field(default_factory=lambda: list(ARCHS))
    corpus: str = "tinyshakespeare"
    max_chars: int = 0  # 0 = the whole text
    val_fraction: float = 0.1
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_state: int = 8
    expand: int = 2
    seq_len: int = 64
    batch_size: int = 16
    steps: int = 200
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.01
    val_windows: int = 32  # held-out windows of seq_len for the recorded loss

    def validate(self) -> None:
        require(self.archs and len(set(self.archs)) == len(self.archs), "archs must be non-empty and distinct")
        require(self.max_chars >= 0, f"max_chars must be >= 0, got {self.max_chars}")
        require(0 < self.val_fraction < 1, f"val_fraction must be in (0, 1), got {self.val_fraction}")
        require(self.d_model > 0 and self.n_layers >= 1, "d_model and n_layers must be positive")
        require(self.n_heads > 0 and self.d_model % self.n_heads == 0, "n_heads must divide d_model")
        require((self.d_model // self.n_heads) % 4 == 0, "d_model / n_heads must be a multiple of 4 (rotary quarter)")
        require(self.d_state > 0 and self.expand > 0, "d_state and expand must be positive")
        require(self.seq_len >= 2 and self.batch_size > 0 and self.steps > 0, "seq_len, batch_size, steps too small")
        require(self.lr > 0 and 0 <= self.warmup_steps <= self.steps, "lr must be > 0, warmup_steps in [0, steps]")
        require(self.weight_decay >= 0 and self.val_windows > 0, "weight_decay >= 0 and val_windows > 0")


RECIPES: dict[str, PretrainRecipe] = {
    "smoke": PretrainRecipe(d_model=32, n_layers=2, d_state=4, seq_len=32, batch_size=8, steps=12, warmup_steps=2,
                            max_chars=200_000, val_windows=8),
    "cpu": PretrainRecipe(d_model=64, n_layers=4, d_state=8, seq_len=64, batch_size=16, steps=200, warmup_steps=20),
}


def hf_config(arch: str, r: PretrainRecipe):
    """The Hugging Face config of ``arch`` at recipe ``r`` (byte vocabulary)."""
    import transformers

    if arch == "gpt_neox":  # Pythia's choices: rotary_pct 0.25, parallel residual, untied unembedding
        return transformers.GPTNeoXConfig(vocab_size=BYTE_VOCAB, hidden_size=r.d_model, num_hidden_layers=r.n_layers,
                                          num_attention_heads=r.n_heads, intermediate_size=4 * r.d_model,
                                          max_position_embeddings=2048, rotary_pct=0.25, use_parallel_residual=True,
                                          tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    if arch == "mamba":
        return transformers.MambaConfig(vocab_size=BYTE_VOCAB, hidden_size=r.d_model, num_hidden_layers=r.n_layers,
                                        state_size=r.d_state, expand=r.expand,
                                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    raise ConfigError(f"unknown architecture {arch!r}; choose from {list(ARCHS)}")


def byte_ids(corpus: str, max_chars: int = 0) -> torch.Tensor:
    """The corpus as UTF-8 byte ids [N] (int64)."""
    path = resolve_text(corpus)
    text = read_text(path, "pretraining corpus", DataError)
    if max_chars:
        text = text[:max_chars]
    data = text.encode("utf-8")
    if not data:
        raise DataError(f"pretraining corpus {path} is empty")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def _record(name: str, arch: str, recipe: str, r: PretrainRecipe, seed: int) -> dict:
    return {"name": name, "arch": arch, "recipe": recipe, "seed": seed, "config": asdict(r),
            "tokenizer": "utf-8 bytes (id = byte value)"}


def _finished(folder: Path, want: dict) -> bool:
    """True when ``folder`` holds a complete save of exactly this recipe and seed."""
    f = folder / RECORD
    if not f.is_file():
        if folder.exists():
            raise UserError(f"{folder} exists but is not a dlmlab pretraining output (no {RECORD}); "
                            "move it away or choose another output folder")
        return False
    try:
        have = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return all(have.get(k) == v for k, v in want.items()) and (folder / "config.json").is_file()


@torch.no_grad()
def _val_loss(model, ids: torch.Tensor, r: PretrainRecipe) -> float:
    """Mean next-byte cross-entropy (nats) over the first ``val_windows`` held-out windows."""
    n = min(r.val_windows, (len(ids) - 1) // r.seq_len)
    if n < 1:
        raise DataError(f"held-out text of {len(ids)} bytes is too short for seq_len {r.seq_len}")
    windows = ids[: n * r.seq_len + 1].unfold(0, r.seq_len + 1, r.seq_len)  # [n, seq_len + 1], overlapping by one
    was = model.training
    model.eval()
    try:
        loss, _ = NEXT_BYTE.loss(model, NEXT_BYTE.make_batch(windows))
    finally:
        model.train(was)
    return float(loss)


def pretrain_one(arch: str, r: PretrainRecipe, ids: torch.Tensor, seed: int, progress: bool = True,
                 desc: str | None = None):
    """Train one model -> (the HF ``*ForCausalLM``, a record of its losses)."""
    import transformers

    from dlmlab.models.hf_hooked import HFHooked
    from dlmlab.training import TrainConfig, train

    cut = int(len(ids) * (1 - r.val_fraction))
    tr, va = ids[:cut], ids[cut:]
    if len(tr) <= r.seq_len + 1:
        raise DataError(f"pretraining text of {len(ids)} bytes is too short for seq_len {r.seq_len}")
    torch.manual_seed(seed * 1_000 + ARCHS.index(arch))
    cls = transformers.GPTNeoXForCausalLM if arch == "gpt_neox" else transformers.MambaForCausalLM
    hf = cls(hf_config(arch, r))
    model = HFHooked(hf, 0).train()
    cfg = TrainConfig(steps=r.steps, batch_size=r.batch_size, lr=r.lr, warmup_steps=r.warmup_steps,
                      weight_decay=r.weight_decay, seed=seed, log_every=max(1, r.steps // 10), progress=progress)

    def batches(step: int, gen: torch.Generator) -> torch.Tensor:
        starts = torch.randint(0, len(tr) - r.seq_len - 1, (r.batch_size,), generator=gen)
        return torch.stack([tr[s:s + r.seq_len + 1] for s in starts.tolist()])

    t0 = time.process_time()
    hist = train(model, cfg, batches, NEXT_BYTE, out_dir=None, desc=desc or f"pretrain {arch}")
    val = _val_loss(model, va, r)
    rec = {"train_loss": [[row["step"], row["loss"]] for row in hist if "loss" in row],
           "train_loss_last": hist[-1]["loss"] if hist else None, "val_loss": val,
           "val_bits_per_byte": val / math.log(2), "uniform_bits_per_byte": math.log2(BYTE_VOCAB),
           "params": sum(p.numel() for p in model.parameters()), "train_cpu_s": time.process_time() - t0}
    return hf.eval(), rec


def pretrain_small_models(p, out_dir: str | Path, progress: bool = True) -> list[str]:
    """Pretrain (or reuse) the small models of recipe ``p.pretrain_small`` -> their folders' paths.

    ``p``: the state study's preset (``pretrain_small``: a key of :data:`RECIPES`; ``seed``).
    Each model is saved to ``out_dir/<arch>-<recipe>`` (``save_pretrained``) with its record.
    """
    name = getattr(p, "pretrain_small", None)
    if name not in RECIPES:
        raise ConfigError(f"pretrain_small must be one of {sorted(RECIPES)}, got {name!r}")
    from dlmlab.models.hf_hooked import quiet_transformers

    r, seed = RECIPES[name], int(p.seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths, ids = [], None
    with torch_threads(STUDY_THREADS):
        for arch in r.archs:
            folder = out / f"{arch}-{name}"
            want = _record(folder.name, arch, name, r, seed)
            if not _finished(folder, want):
                if ids is None:
                    ids = byte_ids(r.corpus, r.max_chars)
                hf, rec = pretrain_one(arch, r, ids, seed, progress, desc=f"pretrain {folder.name}")
                tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=out))
                try:
                    with quiet_transformers():
                        hf.save_pretrained(str(tmp))
                    atomic_write_text(tmp / RECORD, json.dumps({**want, **rec}, indent=1))
                    if folder.exists():  # an earlier recipe or seed (checked to be ours): replaced
                        shutil.rmtree(folder)
                    tmp.rename(folder)
                finally:
                    if tmp.exists():
                        shutil.rmtree(tmp, ignore_errors=True)
            paths.append(str(folder))
    return paths


def pretrain_record(path: str | Path) -> dict | None:
    """The record a small pretrained folder holds (``None`` for other checkpoints)."""
    f = Path(path) / RECORD
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text())
    except (OSError, json.JSONDecodeError):
        return None
