"""Named hook points shared by every dlmlab model.

A :class:`HookPoint` is an identity module placed at an interesting activation
(``embed``, ``blocks.0.resid_pre``, ``blocks.0.attn.pattern`` ...).  Its name is
its path in ``named_modules()``.  With no hook attached it returns its input
untouched and costs one Python call; models may ask ``hook.active`` to pick a
slower path that materialises an activation only when someone looks at it
(e.g. the attention pattern).

:class:`HookedModule` gives every model the same three context managers:

* ``cache(names)``   -> dict filled with the activations seen during forward;
* ``replace(values)`` -> substitute a tensor (or ``fn(act) -> act``) at points;
* ``add(values)``     -> add a tensor (broadcast) at points.

``names`` is ``None`` (all), a list of exact names / ``fnmatch`` globs, or a
predicate ``name -> bool``.  Hooks are always removed on exit, also on error.
"""

from __future__ import annotations

import contextlib
import fnmatch
from typing import Callable, Iterable, Iterator, Mapping, Union

import torch
from torch import nn

HookFn = Callable[[torch.Tensor, "HookPoint"], Union[torch.Tensor, None]]
NameFilter = Union[None, str, Iterable[str], Callable[[str], bool]]


class HookPoint(nn.Module):
    """Identity module that runs attached functions on the tensor passing through."""

    def __init__(self) -> None:
        super().__init__()
        self.name: str = ""
        self._fns: list[HookFn] = []

    @property
    def active(self) -> bool:
        return bool(self._fns)

    def attach(self, fn: HookFn) -> Callable[[], None]:
        self._fns.append(fn)

        def remove() -> None:
            if fn in self._fns:
                self._fns.remove(fn)

        return remove

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for fn in self._fns:
            out = fn(x, self)
            if out is not None:
                x = out
        return x

    def extra_repr(self) -> str:
        return self.name


def _matcher(names: NameFilter) -> Callable[[str], bool]:
    if names is None:
        return lambda n: True
    if callable(names):
        return names
    if isinstance(names, str):
        names = [names]
    patterns = list(names)
    return lambda n: any(n == p or fnmatch.fnmatchcase(n, p) for p in patterns)


class HookedModule(nn.Module):
    """Mixin for models whose activations are exposed as named :class:`HookPoint` s.

    Call :meth:`setup_hooks` at the end of ``__init__``.
    """

    def setup_hooks(self) -> None:
        self._hook_points: dict[str, HookPoint] = {}
        for name, mod in self.named_modules():
            if isinstance(mod, HookPoint):
                mod.name = name
                self._hook_points[name] = mod

    @property
    def hook_points(self) -> dict[str, HookPoint]:
        return dict(self._hook_points)

    def select_hooks(self, names: NameFilter) -> dict[str, HookPoint]:
        match = _matcher(names)
        chosen = {n: h for n, h in self._hook_points.items() if match(n)}
        if names is not None and not callable(names) and not chosen:
            raise KeyError(
                f"no hook point matches {names!r}; known points include "
                f"{sorted(self._hook_points)[:12]}"
            )
        return chosen

    @contextlib.contextmanager
    def hooks(self, fns: Mapping[str, HookFn]) -> Iterator[None]:
        """Attach ``{name_or_glob: fn}`` for the duration of the block."""
        removers = []
        try:
            for pattern, fn in fns.items():
                for hp in self.select_hooks([pattern]).values():
                    removers.append(hp.attach(fn))
            yield
        finally:
            for r in removers:
                r()

    @contextlib.contextmanager
    def cache(self, names: NameFilter = None, detach: bool = True) -> Iterator[dict[str, torch.Tensor]]:
        """Record activations at the chosen points: ``with m.cache() as c: m(x)``."""
        store: dict[str, torch.Tensor] = {}

        def save(x: torch.Tensor, hp: HookPoint) -> None:
            store[hp.name] = x.detach() if detach else x

        with self.hooks({n: save for n in self.select_hooks(names)}):
            yield store

    @contextlib.contextmanager
    def replace(self, values: Mapping[str, Union[torch.Tensor, Callable]]) -> Iterator[None]:
        """Replace the activation at each named point by a tensor or ``fn(act)``."""

        def make(v):
            if callable(v) and not isinstance(v, torch.Tensor):
                return lambda x, hp: v(x)
            return lambda x, hp: v.to(x.dtype).expand_as(x).clone()

        with self.hooks({n: make(v) for n, v in values.items()}):
            yield

    @contextlib.contextmanager
    def add(self, values: Mapping[str, torch.Tensor]) -> Iterator[None]:
        """Add a (broadcastable) tensor to the activation at each named point."""
        with self.hooks({n: (lambda v: lambda x, hp: x + v.to(x.dtype))(v) for n, v in values.items()}):
            yield
