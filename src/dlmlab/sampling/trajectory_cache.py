"""A trajectory cache: sample once, index the activations like an activation cache, by hook point and step.

``traj = run_sampler_with_cache(model, canvas, prompt_len, cfg, g, names_filter=["blocks.1.resid_post"])``
decodes as :func:`~dlmlab.sampling.decode.decode` does (the same tokens, bit for bit: the hooks only read) and
keeps, at every step (or the ``steps`` chosen), the activations at the chosen hook points:

* ``traj["blocks.1.resid_post", s]`` -> [B, N, ...] at absolute canvas positions, NaN where absent;
  ``traj.present(name, s)`` -> bool [B, N] says where it is present.  A position is absent where the
  step's forward did not compute it (a cached forward runs a window of positions, and only the rows that
  need it: a finished block's rows, or a row whose input did not change, are not run) or where the
  ``positions`` choice left it out.
* ``traj.stack(name)`` -> [S, B, N, ...] over the cached steps ``traj.steps_cached`` (and
  ``traj.stack_present(name)`` [S, B, N]).
* per step: ``traj.step_input(s)`` (the canvas the step's forward saw) [B, N], and the bool [B, N] masks
  ``prompt``, ``masked(s)`` (still masked at the step's input), ``committed_now(s)``,
  ``committed_earlier(s)``; ``mask_rate(s)`` [B] (masked share of the whole canvas, what the model sees).

Memory is bounded by choosing ``steps``, ``positions`` (``all``, ``masked``: masked at the step's input,
``committed``: committed at this step, ``generated``), ``dtype`` and, for long runs, ``spill_dir``: each
step's activations are written to ``spill_dir/step_000123.safetensors`` as the step ends and read back
on access.  A stored position costs ``prod(feature shape) * itemsize`` bytes plus 16 bytes of index
(``traj.nbytes()`` counts them; docs/trajectory.md gives the arithmetic).

``traj.exact`` says whether the decoder's KV reuse was exact (:func:`~dlmlab.sampling.kv_reuse.kv_reuse_exactness`):
with exact reuse a stored activation equals a fresh forward on that step's input (with the decoder's
attention mask); with an approximate one it is what the approximate forward computed, labelled so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from dlmlab.config import Config, require
from dlmlab.errors import UserError
from dlmlab.sampling.config import DecodeConfig
from dlmlab.sampling.decode import decode, prompt_canvas
from dlmlab.sampling.denoiser import as_denoiser
from dlmlab.sampling.interventions import Intervention, position_axis, step_list
from dlmlab.sampling.trajectory import DecodeResult, StepRecord, TraceConfig

CACHE_POSITIONS = ("all", "masked", "committed", "generated")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
INDEX_BYTES = 16  # two int64 indices (row, position) per stored position


@dataclass
class TrajectoryCacheConfig(Config):
    """What a trajectory cache keeps.  names: hook point names or globs; steps: global decoder steps (None:
    every step); positions: ``all`` | ``masked`` | ``committed`` | ``generated``; dtype: ``float32`` |
    ``float16`` | ``bfloat16`` | ``float64`` | None (as computed); spill_dir: write each step to disk there."""

    names: list[str]
    steps: list[int] | None = None
    positions: str = "all"
    dtype: str | None = None
    spill_dir: str | None = None

    def validate(self) -> None:
        require(bool(self.names), "names_filter must name at least one hook point")
        require(self.steps is None or all(s >= 0 for s in self.steps), f"steps must be >= 0, got {self.steps}")
        require(self.positions in CACHE_POSITIONS, f"positions must be one of {CACHE_POSITIONS}, got {self.positions!r}")
        require(self.dtype is None or self.dtype in DTYPES, f"dtype must be one of {list(DTYPES)} or None, "
                                                             f"got {self.dtype!r}")


@dataclass
class _Entry:
    """One hook point at one step: values [n, *feature] at (rows [n], positions [n]), or where on disk."""

    rows: torch.Tensor | None
    pos: torch.Tensor | None
    values: torch.Tensor | None
    file: Path | None = None


class Trajectory:
    """A decode's records and its cached activations (see the module).  ``result``: the
    :class:`DecodeResult`; ``records``: one :class:`StepRecord` per step (activations moved into the cache)."""

    def __init__(self, canvas: torch.Tensor, prompt_len: int, mask_id: int, shift: bool, cfg: TrajectoryCacheConfig,
                 names: list[str]) -> None:
        self.canvas, self.prompt_len, self.mask_id, self.shift = canvas.clone(), prompt_len, mask_id, shift
        self.cfg, self.names = cfg, names
        self.records: list[StepRecord] = []
        self.result: DecodeResult | None = None
        self._entries: dict[tuple[str, int], _Entry] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}  # feature shape per name (position axis removed)
        self.B, self.N = canvas.shape

    # -- filling (the decoder's callback) --------------------------------------------------------
    def _take(self, rec: StepRecord) -> None:
        before = self.step_input(rec.step) if rec.step == len(self.records) else None
        self.records.append(rec)
        acts, rec.activations = rec.activations, []
        if not acts:
            return
        dtype = DTYPES.get(self.cfg.dtype) if self.cfg.dtype else None
        tensors: dict[str, torch.Tensor] = {}
        for a in acts:
            ax = position_axis(a.name)
            v = a.value.movedim(ax, 1) if ax != 1 else a.value  # [R, T, *feat]
            if ax != 1 and v.shape[-1] < self.N:  # attention keys 0..Tk-1: pad to the canvas
                v = torch.nn.functional.pad(v.float(), (0, self.N - v.shape[-1]), value=float("nan"))
            R, T = v.shape[:2]
            rows = a.rows[:, None].expand(R, T)
            pos = torch.arange(a.start, a.start + T)[None].expand(R, T)
            if self.cfg.positions == "all":  # one copy of the whole window
                vals = v.detach().reshape((R * T,) + tuple(v.shape[2:]))
                vals = vals.to(dtype) if dtype is not None and vals.dtype != dtype else vals.clone()
                e = _Entry(rows.reshape(-1).clone(), pos.reshape(-1).clone(), vals.cpu())
            else:
                keep = self._keep(rec, before, rows, pos)
                vals = v[keep.to(v.device)].detach()  # boolean indexing copies
                vals = vals.to(dtype) if dtype is not None else vals
                e = _Entry(rows[keep].clone(), pos[keep].clone(), vals.cpu())
            self._shapes[a.name] = tuple(v.shape[2:])
            key = (a.name, rec.step)
            if key in self._entries:  # two forwards of one step (not made by the decoder today): concatenate
                old = self._entries[key]
                e = _Entry(torch.cat([old.rows, e.rows]), torch.cat([old.pos, e.pos]), torch.cat([old.values, e.values]))
            self._entries[key] = e
            tensors[a.name] = e.values
        if self.cfg.spill_dir is not None:
            self._spill(rec.step, list(tensors))

    def _keep(self, rec: StepRecord, before: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        kind = self.cfg.positions
        if kind == "all":
            return torch.ones_like(rows, dtype=torch.bool)
        if kind == "generated":
            return pos >= self.prompt_len
        full = (before == self.mask_id) if kind == "masked" else rec.committed
        return full.cpu()[rows, pos]

    def _spill(self, step: int, names: list[str]) -> None:
        from safetensors.torch import save_file

        d = Path(self.cfg.spill_dir)
        d.mkdir(parents=True, exist_ok=True)
        f = d / f"step_{step:06d}.safetensors"
        out = {}
        for n in names:
            e = self._entries[(n, step)]
            out.update({f"{n}/rows": e.rows.contiguous(), f"{n}/pos": e.pos.contiguous(),
                        f"{n}/values": e.values.contiguous()})
        try:
            save_file(out, str(f))
        except Exception as err:  # a disk that filled up or turned read-only during the decode
            raise UserError(f"spill_dir {str(d)!r}: cannot write {f.name} ({type(err).__name__}: {err})") from None
        for n in names:
            self._entries[(n, step)] = _Entry(None, None, None, f)

    def _load(self, name: str, step: int) -> _Entry:
        key = (name, step)
        if key not in self._entries:
            if name not in self.names:
                raise UserError(f"{name!r} was not cached (cached: {', '.join(self.names)})")
            raise UserError(f"step {step} was not cached for {name!r} (cached steps: {self.steps_cached})")
        e = self._entries[key]
        if e.file is None:
            return e
        from safetensors import safe_open

        with safe_open(str(e.file), framework="pt") as f:
            return _Entry(f.get_tensor(f"{name}/rows"), f.get_tensor(f"{name}/pos"), f.get_tensor(f"{name}/values"))

    # -- reading ---------------------------------------------------------------------------------
    @property
    def tokens(self) -> torch.Tensor:
        """The decoded tokens [B, N]."""
        return self.result.tokens

    @property
    def n_steps(self) -> int:
        return len(self.records)

    @property
    def exact(self) -> bool:
        """True when the decoder's cache is exact for this model and attention (always for cache ``none``)."""
        return self.result.exactness == "exact"

    @property
    def steps_cached(self) -> list[int]:
        return sorted({s for _, s in self._entries})

    def __getitem__(self, key: tuple[str, int]) -> torch.Tensor:
        """``traj[name, step]`` -> [B, N, ...] in the activation's layout (patterns [B, H, N, N]), NaN where absent."""
        if not (isinstance(key, tuple) and len(key) == 2):
            raise UserError("index a trajectory as traj[name, step]")
        name, step = key
        e = self._load(name, int(step))
        feat = self._shapes[name]
        out = torch.full((self.B, self.N) + feat, float("nan"), dtype=_float(e.values.dtype))
        out[e.rows, e.pos] = e.values.to(out.dtype)
        ax = position_axis(name)
        return out.movedim(1, ax) if ax != 1 else out

    def present(self, name: str, step: int) -> torch.Tensor:
        """Bool [B, N]: positions whose activation at ``name`` was computed and kept at ``step``."""
        e = self._load(name, int(step))
        out = torch.zeros(self.B, self.N, dtype=torch.bool)
        out[e.rows, e.pos] = True
        return out

    def stack(self, name: str, steps: Sequence[int] | None = None) -> torch.Tensor:
        """[S, B, N, ...] over ``steps`` (default: every cached step, :attr:`steps_cached`), NaN where absent."""
        steps = self.steps_cached if steps is None else list(steps)
        return torch.stack([self[name, s] for s in steps])

    def stack_present(self, name: str, steps: Sequence[int] | None = None) -> torch.Tensor:
        """Bool [S, B, N]: :meth:`present` over ``steps`` (default: every cached step)."""
        steps = self.steps_cached if steps is None else list(steps)
        return torch.stack([self.present(name, s) for s in steps])

    # -- per-step masks --------------------------------------------------------------------------
    def step_input(self, step: int) -> torch.Tensor:
        """The canvas [B, N] the step's forward saw (the tokens before the step)."""
        if step < 0 or step > len(self.records):
            raise UserError(f"step {step} out of range: the decode took {len(self.records)} steps")
        return self.canvas if step == 0 else self.records[step - 1].tokens

    @property
    def prompt(self) -> torch.Tensor:
        """Bool [B, N]: the prompt positions."""
        p = torch.zeros(self.B, self.N, dtype=torch.bool)
        p[:, :self.prompt_len] = True
        return p

    def masked(self, step: int) -> torch.Tensor:
        """Bool [B, N]: still masked at the step's input."""
        return self.step_input(step) == self.mask_id

    def committed_now(self, step: int) -> torch.Tensor:
        """Bool [B, N]: committed by this step."""
        return self.records[step].committed.cpu()

    def committed_earlier(self, step: int) -> torch.Tensor:
        """Bool [B, N]: filled by an earlier step (masked in the input canvas, no longer at the step's input)."""
        return (self.canvas == self.mask_id) & ~self.masked(step)

    def mask_rate(self, step: int, over: str = "canvas") -> torch.Tensor:
        """[B]: masked share at the step's input, of the whole canvas (``canvas``: the rate a model trained on
        whole corrupted sequences sees) or of the positions to fill (``generated``)."""
        m = self.masked(step).float()
        if over == "canvas":
            return m.mean(1)
        if over == "generated":
            return m.sum(1) / (self.canvas == self.mask_id).float().sum(1).clamp(min=1)
        raise UserError(f"over must be 'canvas' or 'generated', got {over!r}")

    def mask_rates(self, over: str = "canvas") -> torch.Tensor:
        """[steps, B]: :meth:`mask_rate` at every step."""
        return torch.stack([self.mask_rate(s, over) for s in range(self.n_steps)])

    def entropy(self) -> torch.Tensor:
        """[steps, B, N] entropy of the step's candidates (NaN off candidates), from the records."""
        return torch.stack([r.entropy for r in self.records]).cpu()

    def commits_per_step(self) -> torch.Tensor:
        """[steps, B] positions committed at each step."""
        return torch.stack([r.committed.sum(1) for r in self.records]).cpu()

    def nbytes(self) -> int:
        """Bytes the cached activations take (in memory or on disk; indices included)."""
        total = 0
        for (name, _), e in self._entries.items():
            if e.file is not None:
                e = self._load(name, _)
            total += e.values.numel() * e.values.element_size() + e.rows.numel() * INDEX_BYTES
        return total

    def __repr__(self) -> str:
        return (f"Trajectory({self.n_steps} steps, {len(self.names)} hook points at {len(self.steps_cached)} steps, "
                f"positions={self.cfg.positions!r}, {'exact' if self.result and self.exact else 'approximate'})")


def check_spill_dir(d: Path) -> None:
    """Refuse, before any step runs, a ``spill_dir`` that is a file, holds files already (another trajectory's
    steps would be overwritten and read back as this one's) or cannot be written."""
    if d.exists() and not d.is_dir():
        raise UserError(f"spill_dir {str(d)!r} is a file, not a folder")
    if d.is_dir() and any(d.iterdir()):
        raise UserError(f"spill_dir {str(d)!r} is not empty: give each trajectory its own (empty or new) folder")
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / ".write_probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise UserError(f"spill_dir {str(d)!r} cannot be written ({type(err).__name__}: {err.strerror})") from None
    if not os.access(d, os.W_OK):
        raise UserError(f"spill_dir {str(d)!r} cannot be written (no write permission)")


def _float(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype.is_floating_point else torch.float32


def bytes_per_step(feature_numel: int, positions: int, itemsize: int = 4) -> int:
    """Bytes one hook point costs per step: ``positions`` stored positions x (features x itemsize + index)."""
    return positions * (feature_numel * itemsize + INDEX_BYTES)


def run_sampler_with_cache(model, canvas: torch.Tensor, prompt_len: int, cfg: DecodeConfig | None = None,
                           generator: torch.Generator | None = None, *, names_filter, steps: Sequence[int] | None = None,
                           positions: str = "all", dtype: str | None = None, spill_dir: str | Path | None = None,
                           mask_id: int | None = None, shift_logits: bool = False,
                           interventions: Sequence[Intervention] | None = None,
                           callback: Callable[[StepRecord], None] | None = None, progress: bool = False) -> Trajectory:
    """Decode ``canvas`` [B,N] as :func:`~dlmlab.sampling.decode.decode` does and cache the activations at the
    hook points ``names_filter`` (names or globs) -> :class:`Trajectory`.  ``steps`` / ``positions`` / ``dtype``
    / ``spill_dir``: see :class:`TrajectoryCacheConfig`; ``interventions`` as in ``decode`` (the cache records the
    activations as the interventions left them); ``callback(StepRecord)`` after each step."""
    den = as_denoiser(model, mask_id, shift_logits)
    if den.hooked is None:
        raise UserError("a trajectory cache needs a model with hook points (a dlmlab HookedModule)")
    names = [names_filter] if isinstance(names_filter, str) else list(names_filter)
    cc = TrajectoryCacheConfig(names=names, steps=None if steps is None else step_list(steps, "steps"),
                               positions=positions, dtype=dtype, spill_dir=None if spill_dir is None else str(spill_dir))
    if cc.spill_dir is not None:
        check_spill_dir(Path(cc.spill_dir))
    resolved = list(den.hooked.select_hooks(names))  # an unknown name raises here, naming the closest
    traj = Trajectory(canvas, prompt_len, den.mask_id, den.shift, cc, resolved)

    def take(rec: StepRecord) -> None:
        traj._take(rec)
        if callback is not None:
            callback(rec)

    trace = TraceConfig(hooks=resolved, steps=cc.steps)
    traj.result = decode(den, canvas, prompt_len, cfg, generator, trace=trace, callback=take, progress=progress,
                         interventions=interventions)
    traj.result.trajectory = traj.records
    for rec in traj.records:
        rec.label(traj.result.kv_reuse, traj.result.exactness)
    return traj


def generate_with_cache(model, prompt: torch.Tensor, gen_len: int, cfg: DecodeConfig | None = None,
                        generator: torch.Generator | None = None, **kwargs) -> Trajectory:
    """prompt [B,P] followed by ``gen_len`` masks -> :class:`Trajectory` (``kwargs`` as :func:`run_sampler_with_cache`)."""
    den, canvas = prompt_canvas(model, prompt, gen_len, kwargs, error=UserError)
    return run_sampler_with_cache(den, canvas, prompt.shape[1], cfg, generator, **kwargs)

