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
* ``add(values)``     -> add a tensor (broadcast) at points;

and one call, ``run_with_cache(tokens, names)`` -> ``(logits, ActivationCache)``
(:mod:`dlmlab.interp.activation_cache`), optionally with the gradient of a loss at every cached point.

TransformerLens idioms work as there: ``run_with_cache(tokens, names_filter=...)`` (``names_filter`` is
``names``), ``run_with_hooks(tokens, fwd_hooks=[(name, fn)], bwd_hooks=[...])``, hook names spelt
TransformerLens's way (``blocks.0.attn.hook_pattern``; :mod:`dlmlab.interp.tl_names`), and, with a tokenizer
attached (``model.tokenizer``; :func:`dlmlab.load` attaches the run's), ``to_tokens`` / ``to_str_tokens`` /
``to_string``.

TransformerLens's hook management works too: ``add_hook`` / ``reset_hooks``, ``hooks(fwd_hooks=...)``, and
``return_type="loss"`` on every forward (:mod:`dlmlab.interp.loss`).

``names`` is ``None`` (all points except the opt-in ones), a list of exact names / ``fnmatch``
globs, or a predicate ``name -> bool``, called with each point's dlmlab name and, where it has one, its
TransformerLens name (:func:`~dlmlab.interp.tl_names.to_tl_name`); a hook function gets ``hook.name`` as the
name the point was chosen by, and ``hook.layer()``.  *Opt-in* points are those that cost a lot to build and
are only built when hooked (the per-head attention output ``blocks.{i}.attn.head_out``
[B,T,H,D]; see :attr:`HookedModule.opt_in_points`): ``names=None`` leaves them out, a name or
glob / predicate that matches them takes them.  *Deferred* points (the attention pattern
``blocks.{i}.attn.pattern``, which needs the slower explicit attention path; see
:attr:`HookedModule.deferred_points`) are, in ``run_with_cache(names=None)``, left out of the
forward and computed on first read by a second forward (see :meth:`HookedModule.run_with_cache`); a
name, glob or predicate that asks for them records them in the one forward.
Every name, glob or predicate must match at least one hook point,
else :class:`UnknownHookPoint` (a :class:`~dlmlab.errors.UserError`) names it and the
closest known points.  Tensors given to ``replace`` / ``add`` are moved to the
activation's device and dtype.  Hooks are always removed on exit, also on error.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import re
from typing import Callable, Iterable, Iterator, Mapping, Union

import torch
from torch import nn

from dlmlab.errors import UserError
from dlmlab.interp import tl_names
from dlmlab.interp.activation_cache import ActivationCache

HookFn = Callable[[torch.Tensor, "HookPoint"], Union[torch.Tensor, None]]
NameFilter = Union[None, str, Iterable[str], Callable[[str], bool]]


class HookPoint(nn.Module):
    """Identity module that runs attached functions on the tensor passing through."""

    def __init__(self, opt_in: bool = False) -> None:
        super().__init__()
        self.name: str = ""
        self.opt_in = opt_in  # True: costly to build, left out of ``names=None`` (cache / run_with_cache)
        self.deferred = False  # True: run_with_cache(names=None) computes it on first read (see deferred_points)
        self._fns: list[HookFn] = []
        self.ctx: dict = {}  # TransformerLens's hook.ctx: state a hook function keeps between calls

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

    def layer(self) -> int:
        """The block index in the name (``blocks.3.attn.z`` -> 3), as TransformerLens's ``hook.layer()``."""
        return layer_of(self.name)

    def extra_repr(self) -> str:
        return self.name


def layer_of(name: str) -> int:
    m = re.match(r"^blocks\.(\d+)\.", name)
    if m is None:
        raise UserError(f"hook point {name!r} is not inside a block, so it has no layer")
    return int(m.group(1))


class HookView:
    """What a hook function gets as ``hook`` when the point was chosen by a name other than its dlmlab one
    (TransformerLens's spelling): ``hook.name`` is that name, ``hook.layer()`` works, and anything else
    is the :class:`HookPoint`'s."""

    __slots__ = ("point", "name")

    def __init__(self, point: HookPoint, name: str) -> None:
        self.point, self.name = point, name

    def layer(self) -> int:
        return layer_of(self.point.name)

    def __getattr__(self, attr: str):
        return getattr(self.point, attr)

    def __repr__(self) -> str:
        return f"HookView({self.name!r} = {self.point.name!r})"


def _as_named(fn: HookFn, point: HookPoint, name: str) -> HookFn:
    """``fn`` called with ``hook.name == name`` (``fn`` itself when ``name`` is the point's own)."""
    if name == point.name:
        return fn
    view = HookView(point, name)
    return lambda x, hp: fn(x, view)


class UnknownHookPoint(UserError, KeyError):
    """A hook name or glob that matches no hook point of the model."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


def _patterns(names: NameFilter) -> list[str] | None:
    """The explicit names / globs in ``names`` as given (None for "all" or a predicate)."""
    if names is None or callable(names):
        return None
    if isinstance(names, str):
        return [names]
    patterns = list(names)
    for p in patterns:
        if not isinstance(p, str):
            raise TypeError(f"hook names must be strings (names or fnmatch globs), got {type(p).__name__} {p!r}")
    return patterns


def _unknown(pattern: str, known: list[str]) -> UnknownHookPoint:
    candidates = known
    if any(c in pattern for c in "*?["):  # a glob: compare it with the names written as globs (digits -> *)
        candidates = list(dict.fromkeys(re.sub(r"\d+", "*", n) for n in known)) + known
    close = difflib.get_close_matches(pattern, candidates, n=4, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    some = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
    return UnknownHookPoint(f"no hook point matches {pattern!r}{hint} (the model's {len(known)} points "
                            f"include {some}; see model.hook_points)")


def _unmatched_predicate(pred: Callable, known: list[str]) -> UnknownHookPoint:
    """The error for a predicate true for no point: the closest points to the strings in its code."""
    both = known + [t for t in map(tl_names.to_tl_name, known) if t]
    tails = sorted({n.rpartition(".")[2] for n in both} | {n.split(".", 2)[-1] for n in both})
    words = [c for c in getattr(getattr(pred, "__code__", None), "co_consts", ()) if isinstance(c, str)]
    close = list(dict.fromkeys(t for w in words for t in difflib.get_close_matches(w, tails, n=3, cutoff=0.6)))
    hint = f"; closest point names: {', '.join(repr(c) for c in close[:5])}" if close else ""
    what = getattr(pred, "__qualname__", type(pred).__name__)
    examples = ", ".join(f"{n!r} ({tl_names.to_tl_name(n)!r})" for n in known[:3] if tl_names.to_tl_name(n))
    return UnknownHookPoint(f"the predicate {what} is true for none of the model's {len(known)} hook points "
                            f"(it is called with each point's dlmlab and TransformerLens name, e.g. {examples}){hint}; "
                            "see model.hook_points")


def _match(names: NameFilter, points: Mapping[str, "HookPoint"]) -> dict[str, str]:
    """{dlmlab name: the name it was chosen by} for the points ``names`` chooses (a name, a glob, a list of
    them, or a predicate, each in either spelling); raises :class:`UnknownHookPoint` for a name, glob or
    predicate that matches none."""
    known = list(points)
    if callable(names):
        chosen = {}
        for n in known:
            if names(n):
                chosen[n] = n
            else:
                tl = tl_names.to_tl_name(n)
                if tl is not None and names(tl):
                    chosen[n] = tl
        if not chosen:
            raise _unmatched_predicate(names, known)
        return chosen
    chosen = {}
    for p in _patterns(names) or []:
        ours = tl_names.from_tl_name(p)
        hits = [n for n in known if n == ours or fnmatch.fnmatchcase(n, ours)]
        if not hits:
            raise _unknown(ours, known)
        for n in hits:
            chosen.setdefault(n, n if ours == p else (p if n == ours else tl_names.to_tl_name(n) or n))
    return {n: chosen[n] for n in known if n in chosen}  # in forward order


class HookedModule(nn.Module):
    """Mixin for models whose activations are exposed as named :class:`HookPoint` s.

    Call :meth:`setup_hooks` at the end of ``__init__``.
    """

    #: globs of the points left out of ``names=None`` (besides any ``HookPoint(opt_in=True)``)
    opt_in_points: tuple[str, ...] = ("*.attn.head_out",)
    #: globs of the points ``run_with_cache(names=None)`` computes on first read (they slow the forward down)
    deferred_points: tuple[str, ...] = ("*.attn.pattern",)
    #: the text tokenizer of ``to_tokens`` / ``to_str_tokens`` / ``to_string`` (``dlmlab.load`` sets the run's)
    tokenizer = None
    #: the objective of ``return_type="loss"`` (:mod:`dlmlab.interp.loss`); set it to ``dlmlab.load(run).objective``
    objective = None

    _TL_CALL_KEYWORDS = ("return_type", "objective", "loss_seed", "loss_per_token")

    def __call__(self, *args, **kwargs):
        """The forward, with TransformerLens's ``return_type`` ("logits" / "loss" / "both" / None) taken first
        (:mod:`dlmlab.interp.loss`); without it, exactly ``nn.Module.__call__``."""
        if not any(k in kwargs for k in self._TL_CALL_KEYWORDS):
            return super().__call__(*args, **kwargs)
        from dlmlab.interp.loss import call_with_return_type

        if not args:
            raise UserError("return_type needs the tokens as the first argument")
        call = super().__call__
        return call_with_return_type(self, call, *args, **kwargs)

    def setup_hooks(self) -> None:
        self._hook_points: dict[str, HookPoint] = {}
        for name, mod in self.named_modules():
            if isinstance(mod, HookPoint):
                mod.name = name
                if any(fnmatch.fnmatchcase(name, g) for g in self.opt_in_points):
                    mod.opt_in = True
                if any(fnmatch.fnmatchcase(name, g) for g in self.deferred_points):
                    mod.deferred = True
                self._hook_points[name] = mod

    @property
    def hook_points(self) -> dict[str, HookPoint]:
        return dict(self._hook_points)

    def select_hooks(self, names: NameFilter) -> dict[str, HookPoint]:
        """The hook points ``names`` chooses (``None``: all but the opt-in ones); raises
        :class:`UnknownHookPoint` for a name or glob that matches none (a typo must not be dropped
        silently)."""
        if names is None:
            return {n: h for n, h in self._hook_points.items() if not h.opt_in}
        return {n: self._hook_points[n] for n in _match(names, self._hook_points)}

    def _attach_pairs(self, fwd_hooks: Iterable = (), bwd_hooks: Iterable = (), what: str = "run_with_hooks"
                      ) -> list[Callable[[], None]]:
        """Attach TransformerLens's ``(name_or_predicate, fn)`` pairs (``bwd_hooks``: on the gradient) ->
        their removers; ``hook.name`` is the name a point was chosen by.  Attaches none when one is bad."""
        plan = []
        for hooks, backward in ((fwd_hooks, False), (bwd_hooks, True)):
            for pair in hooks:
                if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and callable(pair[1])):
                    raise UserError(f"{what} wants (name, fn) pairs, got {pair!r}")
                name, fn = pair
                for n, shown in _match(name if callable(name) else [name], self._hook_points).items():
                    hp = self._hook_points[n]
                    named = _as_named(fn, hp, shown)
                    plan.append((hp, _on_grad(named) if backward else named))
        return [hp.attach(fn) for hp, fn in plan]

    @contextlib.contextmanager
    def hooks(self, fns: Mapping[str, HookFn] | None = None, *, fwd_hooks: Iterable = (), bwd_hooks: Iterable = (),
              reset_hooks_end: bool = True) -> Iterator["HookedModule"]:
        """Attach ``{name_or_glob: fn}`` (dlmlab) or TransformerLens's ``fwd_hooks=[(name_or_predicate, fn)]`` /
        ``bwd_hooks=[...]`` for the duration of the block (yields the model).  ``reset_hooks_end=True`` (as in
        TransformerLens) also removes the hooks :meth:`add_hook` added inside the block."""
        before = len(self._added())
        removers = []
        try:
            removers = self._attach_pairs(list((fns or {}).items()) + list(fwd_hooks), bwd_hooks, "hooks")
            yield self
        finally:
            for r in removers:
                r()
            if reset_hooks_end:
                added = self._added()
                for remove, _ in added[before:]:
                    remove()
                del added[before:]

    def _added(self) -> list:
        """The (remover, permanent) of each hook :meth:`add_hook` attached."""
        if "_added_hooks" not in self.__dict__:
            self.__dict__["_added_hooks"] = []
        return self.__dict__["_added_hooks"]

    def add_hook(self, name, hook: HookFn, dir: str = "fwd", is_permanent: bool = False) -> None:
        """TransformerLens's ``add_hook``: attach ``hook(activation, hook)`` at the points ``name`` (a name, glob or
        predicate) chooses until :meth:`reset_hooks` (``dir="bwd"``: on the gradient)."""
        if dir not in ("fwd", "bwd"):
            raise UserError(f"add_hook: dir must be 'fwd' or 'bwd', got {dir!r}")
        pair = [(name, hook)]
        removers = self._attach_pairs(pair if dir == "fwd" else (), pair if dir == "bwd" else (), "add_hook")
        self._added().extend((r, is_permanent) for r in removers)

    def reset_hooks(self, including_permanent: bool = False, clear_contexts: bool = True) -> None:
        """Remove the hooks :meth:`add_hook` attached (the permanent ones too with ``including_permanent``) and
        empty every point's ``hook.ctx`` (unless ``clear_contexts=False``)."""
        if clear_contexts:
            for hp in self._hook_points.values():
                hp.ctx.clear()
        keep = []
        for remove, permanent in self._added():
            if permanent and not including_permanent:
                keep.append((remove, permanent))
            else:
                remove()
        self._added()[:] = keep

    def _attach_each(self, points: Mapping[str, HookPoint], fn: HookFn) -> list[Callable[[], None]]:
        return [hp.attach(fn) for hp in points.values()]

    @contextlib.contextmanager
    def cache(self, names: NameFilter = None, detach: bool = True) -> Iterator[dict[str, torch.Tensor]]:
        """Record activations at the chosen points: ``with m.cache() as c: m(x)``.

        The stored tensors are references (no copy); ``detach=True`` stores them cut from autograd.
        A later hook that changes a tensor in place would change the stored one too."""
        store: dict[str, torch.Tensor] = {}

        if detach:
            def save(x: torch.Tensor, hp: HookPoint) -> None:
                store[hp.name] = x.detach()
        else:
            def save(x: torch.Tensor, hp: HookPoint) -> None:
                store[hp.name] = x

        removers = []
        try:
            removers = self._attach_each(self.select_hooks(names), save)
            yield store
        finally:
            for r in removers:
                r()

    def run_with_cache(self, tokens: torch.Tensor, names: NameFilter = None, *, detach: bool = True,
                       loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
                       grad_names: NameFilter = None, step: int | None = None, names_filter: NameFilter = None,
                       **forward_kwargs):
        """Run the model once and return ``(logits, cache)``: an
        :class:`~dlmlab.interp.activation_cache.ActivationCache`
        of the activations at the points ``names`` chooses (``None``: every point but the opt-in ones,
        e.g. per-head outputs, which :meth:`ActivationCache.stack_head_results` builds from ``z``).

        tokens [B,T]; ``forward_kwargs`` go to the model's forward.  Stored tensors are references
        to the activations, detached unless ``detach=False``.

        With ``names=None`` the deferred points (attention patterns) are not recorded during this
        forward, which then keeps the fast attention kernel; the cache lists them and computes them
        all on the first read of one, by a second forward of the same tokens and keywords (copies
        taken now: editing ``tokens`` in place afterwards does not change the patterns).  That read costs
        a forward on the explicit attention path; to read patterns, ask for them instead (a name, glob or
        predicate that matches them: ``names_filter=lambda n: n.endswith("hook_pattern") or ...``).  That
        forward must see the same model: reading raises a :class:`UserError` if a parameter or buffer
        changed since, or if hooks are attached at that moment.  They are recorded in this forward
        instead when they are named, or when hooks are attached now, ``detach=False``, ``loss_fn``
        or a ``kv_cache`` is given.

        ``loss_fn(logits) -> scalar``: also store d loss / d activation at each point ``grad_names``
        chooses (default: the cached points) in ``cache.grads`` (computed with
        :func:`torch.autograd.grad`, so parameters' ``.grad`` are left alone; works with frozen
        parameters too).  Needs grad mode on; the returned logits are then detached.
        ``step``: stored as ``cache.step`` (e.g. the denoising step of a sampling trajectory).
        ``names_filter``: TransformerLens's name for ``names`` (give one of the two); ``remove_batch_dim=True``
        (TransformerLens's): :meth:`ActivationCache.remove_batch_dim` on the cache (a batch of one).
        """
        if names_filter is not None:
            if names is not None:
                raise UserError("run_with_cache got both names and names_filter (the same thing); give one")
            names = names_filter
        if forward_kwargs.pop("remove_batch_dim", False):  # TransformerLens's keyword: a batch of one, squeezed
            logits, cache = self.run_with_cache(tokens, names, detach=detach, loss_fn=loss_fn, grad_names=grad_names,
                                                step=step, **forward_kwargs)
            return logits, cache.remove_batch_dim()
        points = self.select_hooks(names)
        if loss_fn is None:
            deferred: list[str] = []
            if (names is None and detach and forward_kwargs.get("kv_cache") is None
                    and not any(h.active for h in self._hook_points.values())):
                deferred = [n for n, h in points.items() if h.deferred]
                points = {n: h for n, h in points.items() if not h.deferred}
            with self.cache(points.__contains__, detach=detach) as store:
                logits = self(tokens, **forward_kwargs)
            cache = ActivationCache(store, self, step=step, meta=_meta(forward_kwargs))
            if deferred:
                cache.defer(deferred, _DeferredForward(self, tokens, dict(forward_kwargs), deferred))
            return logits, cache
        if not torch.is_grad_enabled():
            raise UserError("run_with_cache(loss_fn=...) computes gradients: call it with grad mode on "
                            "(not under torch.no_grad() / inference_mode())")
        grad_points = points if grad_names is None else self.select_hooks(grad_names)
        store: dict[str, torch.Tensor] = {}
        live: dict[str, torch.Tensor] = {}

        def save(x: torch.Tensor, hp: HookPoint):
            out = None
            if hp.name in grad_points:
                if not x.requires_grad:  # frozen parameters below this point: make it a leaf of the graph
                    x = out = x.detach().requires_grad_(True)
                live[hp.name] = x
            if hp.name in points:
                store[hp.name] = x.detach() if detach else x
            return out

        removers = []
        try:
            removers = self._attach_each({**points, **grad_points}, save)
            logits = self(tokens, **forward_kwargs)
        finally:
            for r in removers:
                r()
        loss = loss_fn(logits)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise UserError(f"loss_fn must return a scalar tensor, got {type(loss).__name__}"
                            f"{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''}")
        names_g = list(live)
        grads = torch.autograd.grad(loss, [live[n] for n in names_g], allow_unused=True)
        grad_store = {n: torch.zeros_like(live[n]) if g is None else g for n, g in zip(names_g, grads)}
        cache = ActivationCache(store, self, step=step, grads=grad_store, meta=_meta(forward_kwargs))
        return logits.detach(), cache

    def run_with_hooks(self, tokens: torch.Tensor, fwd_hooks: Iterable[tuple] = (), bwd_hooks: Iterable[tuple] = (),
                       **forward_kwargs) -> torch.Tensor:
        """TransformerLens's ``run_with_hooks``: one forward with ``fn(activation, hook)`` attached at each
        ``(name_or_predicate, fn)`` of ``fwd_hooks`` (a returned tensor replaces the activation; ``hook.name``
        is the point's name) -> logits.  ``bwd_hooks``: ``fn(grad, hook)`` on d loss / d activation, run when
        the caller back-propagates from the logits (a returned tensor replaces the gradient).  Hooks are
        removed when the forward returns (backward hooks stay on the autograd graph of this forward only).
        A name, glob or predicate may use TransformerLens's spelling (``blocks.0.attn.hook_z``); ``hook.name``
        is then that spelling.  ``return_type="loss"`` (a keyword of every forward): see :mod:`dlmlab.interp.loss`."""

        removers = []
        try:
            removers = self._attach_pairs(fwd_hooks, bwd_hooks)
            return self(tokens, **forward_kwargs)
        finally:
            for r in removers:
                r()

    # TransformerLens's text helpers, with the attached tokenizer (see dlmlab.interp.tl_names)
    def to_tokens(self, text: str | list[str], prepend_bos: bool | None = None) -> torch.Tensor:
        """A text -> ids [1, T]; texts of one token length -> [B, T] (on the model's device; no BOS).
        ``"[M]"`` in a text is the mask token of a masked-diffusion model (as ``to_string`` writes it)."""
        return tl_names.encode_texts(self, text, prepend_bos)

    def to_single_token(self, text: str) -> int:
        """The id of ``text`` when it is one token (else a :class:`~dlmlab.errors.UserError`); ``"[M]"``: the mask."""
        return tl_names.single_token(self, text)

    def to_str_tokens(self, tokens) -> list[str] | list[list[str]]:
        """One string per token of a text, ids [T] / [B, T] or a list of ids."""
        return tl_names.str_tokens(self, tokens)

    def to_string(self, tokens) -> str | list[str]:
        """ids [T] -> text; [B, T] -> one text per row."""
        return tl_names.decode_ids(self, tokens)

    @contextlib.contextmanager
    def replace(self, values: Mapping[str, Union[torch.Tensor, Callable]]) -> Iterator[None]:
        """Replace the activation at each named point by a tensor or ``fn(act)``."""

        def make(v):
            if callable(v) and not isinstance(v, torch.Tensor):
                return lambda x, hp: v(x)
            v = torch.as_tensor(v)
            return lambda x, hp: _like(v, x, hp, "replace").expand_as(x).clone()

        with self.hooks({n: make(v) for n, v in values.items()}):
            yield

    @contextlib.contextmanager
    def add(self, values: Mapping[str, torch.Tensor]) -> Iterator[None]:
        """Add a (broadcastable) tensor to the activation at each named point."""

        def make(v):
            v = torch.as_tensor(v)
            return lambda x, hp: x + _like(v, x, hp, "add")

        with self.hooks({n: make(v) for n, v in values.items()}):
            yield


class _DeferredForward:
    """Computes a cache's deferred points by a second forward of the same input, refusing when the
    model is not the one that ran (a parameter / buffer changed) or hooks are attached."""

    def __init__(self, model: HookedModule, tokens: torch.Tensor, forward_kwargs: dict, names: list[str]) -> None:
        # copies of the input tensors: the caller may edit its tokens in place before the first read
        self.tokens = tokens.clone() if isinstance(tokens, torch.Tensor) else tokens
        self.forward_kwargs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in forward_kwargs.items()}
        self.model, self.names = model, names
        self.fingerprint = self._fingerprint()

    def _fingerprint(self) -> tuple:
        m = self.model
        return (m.training,) + tuple((t.data_ptr(), _version(t)) for t in (*m.parameters(), *m.buffers()))

    def __call__(self) -> dict[str, torch.Tensor]:
        m = self.model
        what = f"the deferred points ({self.names[0]}, ...) of a run_with_cache(names=None) cache"
        if self._fingerprint() != self.fingerprint:
            raise UserError(f"{what} are computed on first read by a second forward, but the model changed since "
                            "(weights, buffers or train/eval mode); run run_with_cache again, or name these points "
                            "in names= so they are recorded in the first forward")
        active = [n for n, h in m._hook_points.items() if h.active]
        if active:
            raise UserError(f"{what} are computed on first read by a second forward, and hooks are attached now "
                            f"(at {active[0]}); read them outside hook contexts, or name them in names=")
        with torch.no_grad(), m.cache(self.names) as store:
            m(self.tokens, **self.forward_kwargs)
        return store


def _on_grad(fn: HookFn) -> HookFn:
    """A forward hook that runs ``fn(grad, hook)`` on d loss / d activation when the caller back-propagates."""
    def attach_grad(x: torch.Tensor, hp: HookPoint) -> None:
        if x.requires_grad:
            x.register_hook(lambda g: fn(g, hp))
    return attach_grad


def _version(t: torch.Tensor) -> int:
    """The tensor's in-place modification counter (-1 for inference-mode tensors, which keep none)."""
    try:
        return t._version
    except RuntimeError:
        return -1


def _meta(forward_kwargs: Mapping) -> dict:
    """What a cache records about the forward: the keywords given (not None) and whether ``embed_add`` was."""
    given = sorted(k for k, v in forward_kwargs.items() if v is not None)
    return {"forward_kwargs": given, "embed_add": "embed_add" in given}


def _like(v: torch.Tensor, x: torch.Tensor, hp: HookPoint, what: str) -> torch.Tensor:
    """``v`` on ``x``'s device and dtype, checked to broadcast to ``x``'s shape."""
    v = v.to(device=x.device, dtype=x.dtype)
    try:
        fits = torch.broadcast_shapes(v.shape, x.shape) == x.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{what} at hook point {hp.name!r}: a tensor of shape {tuple(v.shape)} does not broadcast "
                         f"to the activation's shape {tuple(x.shape)}") from None
    return v
