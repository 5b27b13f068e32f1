"""Interventions by denoising step: forward hooks that act only at chosen steps and positions.

An :class:`Intervention` names a hook point (or glob), what to do there (``add`` a tensor, ``replace`` by a
tensor, or call ``fn(act, ctx) -> act``), the global decoder steps at which it fires (``at_steps``; None:
every step) and the positions it touches (``positions``).  :func:`~dlmlab.sampling.decode.decode` takes a
list of them (``interventions=``); at a step where none fires, the forward runs with no hook attached, so
an intervention at step ``s`` changes nothing before ``s`` and a decode with no interventions is the plain
one, bit for bit.  At a step where one fires, every row still decoding runs on the whole canvas with no reused
output and no reused keys / values, and nothing computed there is reused later, so an intervention acts exactly
at its steps under ``reuse_unchanged`` and exact KV reuse alike; with an approximate KV reuse it is refused.

Positions are absolute canvas positions: ``"all"``, ``"masked"`` (mask id in the step's input),
``"unmasked"``, ``"prompt"``, ``"generated"`` (>= prompt length), a bool tensor [B,N], or
``fn(ctx) -> bool [B,N]``.  A cached forward runs only some rows and a window of positions
(:class:`StepContext` says which); the intervention touches the selected positions inside that window.
The position axis of an activation is axis 1 ([B,T,...]: residual stream, q / k / v / z) except for the
attention pattern and scores ([B,H,Tq,Tk]: the query axis 2).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, Union

import torch

from dlmlab.errors import UserError

Positions = Union[str, torch.Tensor, Callable[["StepContext"], torch.Tensor]]
POSITION_KINDS = ("all", "masked", "unmasked", "prompt", "generated")
MODES = ("add", "replace", "fn")


def position_axis(name: str) -> int:
    """The axis of hook point ``name``'s activation that runs over positions (the query axis of attention
    patterns / scores [B,H,Tq,Tk]; axis 1 of everything else, [B,T,...])."""
    return 2 if name.endswith((".attn.pattern", ".attn.scores", ".attn.attn_scores")) else 1


def step_list(steps, what: str) -> list[int]:
    """``steps`` as a list of ints, or a one-line :class:`UserError` naming ``what``."""
    if isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
        raise UserError(f"{what} must be a list of step numbers (integers >= 0), got {steps!r}")
    out = []
    for s in steps:
        if isinstance(s, bool) or not isinstance(s, (int, torch.Tensor)) and not hasattr(s, "__index__"):
            raise UserError(f"{what} must be integers >= 0, got {s!r} in {list(steps)!r}")
        out.append(int(s))
    return out


@dataclass
class StepContext:
    """Where a forward runs: decoder ``step``; ``rows`` [R] (of the batch); window positions ``start:stop``;
    ``canvas`` [R,N] the rows' tokens at the step's input; the ``mask_id`` and the ``prompt_len``."""

    step: int
    rows: torch.Tensor
    start: int
    stop: int
    canvas: torch.Tensor
    mask_id: int
    prompt_len: int

    def window(self, full: torch.Tensor) -> torch.Tensor:
        """An absolute [B,N,...] tensor -> this forward's part [R, stop-start, ...]."""
        return full[self.rows.to(full.device), self.start:self.stop]

    def select(self, positions: Positions) -> torch.Tensor:
        """Bool [R, stop-start]: the window's positions that ``positions`` chooses."""
        win = self.canvas[:, self.start:self.stop]
        if isinstance(positions, str):
            if positions == "all":
                return torch.ones_like(win, dtype=torch.bool)
            if positions == "masked":
                return win == self.mask_id
            if positions == "unmasked":
                return win != self.mask_id
            pos = torch.arange(self.start, self.stop, device=win.device)[None].expand_as(win)
            return pos < self.prompt_len if positions == "prompt" else pos >= self.prompt_len
        full = positions(self) if callable(positions) else positions
        if not isinstance(full, torch.Tensor) or full.dtype != torch.bool or full.dim() != 2:
            raise UserError("positions must be one of " + ", ".join(POSITION_KINDS) + ", a bool tensor [B,N] or "
                            f"fn(ctx) -> bool [B,N]; got {type(full).__name__}")
        return self.window(full.to(win.device))


@dataclass
class Intervention:
    """Change hook point ``name`` (a name or glob) at steps ``at_steps`` (None: all) and ``positions``.

    mode ``add``: ``value`` is added; ``replace``: ``value`` replaces the activation.  ``value`` is a tensor
    broadcast over one position's activation (e.g. a [D] direction), or, with as many dimensions as the
    activation, an absolute tensor over the whole canvas in the activation's layout ([B,N,D]; patterns
    [B,H,N,Tk]) of which each forward takes its rows and window; ``fn``: ``value(act, ctx) -> act`` on the whole
    activation (``positions`` is then not applied: the function decides)."""

    name: str
    value: torch.Tensor | Callable
    mode: str = "add"
    at_steps: Sequence[int] | None = None
    positions: Positions = "all"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"intervention mode must be one of {MODES}, got {self.mode!r}")
        if self.mode == "fn" and not callable(self.value):
            raise UserError("an intervention with mode 'fn' needs value = fn(act, ctx) -> act")
        if self.mode != "fn" and not isinstance(self.value, torch.Tensor):
            self.value = torch.as_tensor(self.value)
        if isinstance(self.positions, str) and self.positions not in POSITION_KINDS:
            raise UserError(f"positions must be one of {POSITION_KINDS}, a bool tensor [B,N] or fn(ctx); "
                            f"got {self.positions!r}")
        if self.at_steps is not None:
            steps = step_list(self.at_steps, "at_steps")
            if any(s < 0 for s in steps):
                raise UserError(f"at_steps must be >= 0, got {steps}")
            self.at_steps = frozenset(steps)

    def fires(self, step: int) -> bool:
        return self.at_steps is None or step in self.at_steps

    def hook(self, ctx: StepContext) -> Callable:
        """The hook function for this step's forward: ``(act, hook_point) -> act``."""
        if self.mode == "fn":
            return lambda act, hp: self.value(act, ctx)
        value = self.value

        def apply(act: torch.Tensor, hp) -> torch.Tensor:
            ax = position_axis(hp.name)
            sel = ctx.select(self.positions).to(act.device)  # [R, T]
            moved = act.movedim(ax, 1) if ax != 1 else act
            v = value.to(device=act.device, dtype=act.dtype)
            if v.dim() == act.dim():  # an absolute tensor in the activation's layout, over the whole canvas
                v = ctx.window(v.movedim(ax, 1) if ax != 1 else v)
            _check_fits(v, moved, hp.name, ctx)
            shape = (sel.shape[0], sel.shape[1]) + (1,) * (moved.dim() - 2)
            m = sel.reshape(shape)
            out = moved + m * v if self.mode == "add" else torch.where(m, v.expand_as(moved), moved)
            return out.movedim(1, ax) if ax != 1 else out

        return apply


def _check_fits(v: torch.Tensor, moved: torch.Tensor, name: str, ctx: StepContext) -> None:
    """Refuse, naming the hook point, a value that neither broadcasts over one position's activation nor covers
    the forward's rows and window ([R, T, ...] after taking them from a whole-canvas tensor)."""
    feat = tuple(moved.shape[2:])
    if v.dim() == moved.dim():
        ok = tuple(v.shape) == tuple(moved.shape)
    else:
        ok = v.dim() <= len(feat) and all(a in (1, b) for a, b in zip(reversed(v.shape), reversed(feat)))
    if not ok:
        raise UserError(f"intervention at {name!r}: value of shape {tuple(v.shape)} fits neither one position's "
                        f"activation {list(feat)} nor the whole canvas (rows x positions {list(moved.shape[:2])} "
                        f"of this forward at step {ctx.step})")


def check_interventions(interventions: Sequence[Intervention] | None, hooked) -> tuple[Intervention, ...]:
    """The interventions as a tuple, refused in one line when the model has no hook points or a name matches none."""
    if not interventions:
        return ()
    ivs = tuple(interventions)
    for iv in ivs:
        if not isinstance(iv, Intervention):
            raise UserError(f"interventions must be Intervention objects, got {type(iv).__name__}")
    if hooked is None:
        raise UserError("interventions need a model with hook points (a dlmlab HookedModule)")
    for iv in ivs:
        hooked.select_hooks([iv.name])  # an unknown name or glob raises UnknownHookPoint, naming the closest
    return ivs


@contextlib.contextmanager
def intervening(hooked, interventions: Sequence[Intervention], ctx: StepContext) -> Iterator[None]:
    """Attach the interventions' hooks for one forward (removed on exit, also on error)."""
    with contextlib.ExitStack() as stack:
        for iv in interventions:
            stack.enter_context(hooked.hooks({iv.name: iv.hook(ctx)}))
        yield
