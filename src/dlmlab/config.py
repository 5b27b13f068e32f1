"""Typed config dataclasses loaded from dicts / YAML / JSON with validation.

``from_dict(Cls, data)`` builds a (possibly nested) dataclass and raises
:class:`ConfigError` naming the offending field for unknown keys, wrong types,
non-finite numbers or values outside a ``Literal``.  Each dataclass may define
``validate()`` for range checks; it is called after construction.

Config dataclasses that inherit :class:`Config` check themselves in ``__post_init__``
(types, ``Literal`` options, finite numbers, then ``derive()`` and ``validate()``), so a
config built in Python is refused exactly like the same values in YAML.  A field that
``derive()`` computes from others (``d_head = d_model // n_heads`` when left at 0) holds a
:class:`Derived` int, which ``dataclasses.replace`` hands back to ``__post_init__``: it is
derived again from the new values instead of going stale.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import os
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml
from dlmlab.errors import UserError

T = TypeVar("T")


class ConfigError(UserError, ValueError):
    """A bad configuration value; the message names the field."""


class Derived(int):
    """An int field value a config computed from other fields (the user left the field at 0).

    It behaves as a plain int (arithmetic, JSON, torch shapes); ``derive()`` recomputes a
    field whose value is 0 or ``Derived``, so ``dataclasses.replace(cfg, d_model=256)`` gives
    a fresh ``d_head`` while an explicitly set one is kept.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return int.__repr__(self)

    __str__ = __repr__

    def __reduce__(self):
        return (Derived, (int(self),))


yaml.SafeDumper.add_representer(Derived, lambda dumper, v: dumper.represent_int(int(v)))


def is_auto(value: Any) -> bool:
    """True for a field value that ``derive()`` should (re)compute: 0 / None or a :class:`Derived`."""
    return value is None or isinstance(value, Derived) or (type(value) is int and value == 0)


def _check(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return from_dict(tp, value, where)
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {list(allowed)}")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _check(a, value, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        args = get_args(tp)
        inner = args[0] if args else Any
        out = [_check(inner, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return dict(value)
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{where}: must be a finite number, got {value}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value if type(value) in (int, Derived) else int(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is str:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    return value


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def check_fields(obj: Any, where: str | None = None) -> None:
    """Check (and coerce: int -> float, Path -> str) every init field of dataclass ``obj`` against its
    type hint: ``Literal`` options, numbers (finite), strings, nested dataclasses.  Errors name
    ``where.field`` (default: the class name)."""
    cls = type(obj)
    hints = _hints(cls)
    prefix = where or cls.__name__
    for f in dataclasses.fields(obj):
        if not f.init or f.name not in hints:
            continue
        value = getattr(obj, f.name)
        new = _check(hints[f.name], value, f"{prefix}.{f.name}")
        if new is not value:
            object.__setattr__(obj, f.name, new)


class Config:
    """Base of config dataclasses that check themselves when built (also by ``dataclasses.replace``).

    ``__post_init__`` runs :func:`check_fields`, then ``derive()`` (fill fields left at 0 / None from
    others, storing :class:`Derived` values), then ``validate()`` (range checks raising
    :class:`ConfigError`).  Call ``check()`` again after changing fields in place.
    """

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        check_fields(self)
        self.derive()
        self.validate()

    def derive(self) -> None:
        """Compute fields that depend on others; recompute those that hold 0 / None or a :class:`Derived`."""

    def validate(self) -> None:
        """Range checks; raise :class:`ConfigError` naming the field."""


def from_dict(cls: type[T], data: dict, where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``, validating every field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        loc = f"{where}." if where else ""
        raise ConfigError(
            f"unknown field '{loc}{unknown[0]}' (allowed: {', '.join(sorted(fields))})"
        )
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _check(hints[name], value, f"{where}.{name}" if where else name)
    try:
        obj = cls(**kwargs)
    except TypeError as e:  # missing required field
        raise ConfigError(f"{where or cls.__name__}: {e}") from None
    validate = getattr(obj, "validate", None)
    if validate is not None and not isinstance(obj, Config):  # a Config validated itself when built
        validate()
    return obj


def to_dict(obj: Any) -> dict:
    return dataclasses.asdict(obj)


def read_text(path: str | Path, what: str = "file", error: type[Exception] = ConfigError) -> str:
    """The UTF-8 text of ``path``; a missing file, a folder, unreadable or non-UTF-8 bytes raise
    ``error`` (a :class:`UserError`) naming the file and what to do."""
    path = Path(path)
    if not path.exists():
        raise error(f"{what} not found: {path}")
    if path.is_dir():
        raise error(f"{what} {path} is a directory; give the path of a file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{what} {path} is not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}, offset {e.start}); "
                    "convert it to UTF-8") from None


def _mapping(data: Any, path: Path, kind: str) -> dict:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a {kind} mapping of fields at the top level, got {type(data).__name__}")
    return data


def _from_file(cls: type[T], data: dict, path: Path) -> T:
    try:
        return from_dict(cls, data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def load_yaml(cls: type[T], path: str | Path) -> T:
    """Load and validate a YAML config file into ``cls``; errors name the file (and line or field)."""
    path = Path(path)
    text = read_text(path, "config file")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}:{line} is not valid YAML ({getattr(e, 'problem', None) or e})") from None
    return _from_file(cls, _mapping(data, path, "YAML"), path)


def load_json_file(path: str | Path, what: str = "JSON file", hint: str = "") -> Any:
    """Parse a JSON file; a missing / unreadable / corrupt file raises :class:`ConfigError` naming the file
    and the line (``hint``, e.g. what to do, is appended)."""
    path = Path(path)
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: line {e.lineno} column {e.colno} is not valid JSON ({e.msg})"
                          + (f"; {hint}" if hint else "")) from None


def load_json(cls: type[T], path: str | Path, hint: str = "") -> T:
    """Load and validate a JSON config file (e.g. a run's ``config.json``) into ``cls``."""
    path = Path(path)
    data = load_json_file(path, "config file", hint)
    return _from_file(cls, _mapping(data, path, "JSON"), path)


def require(cond: bool, msg: str) -> None:
    """Raise :class:`ConfigError` with ``msg`` unless ``cond``."""
    if not cond:
        raise ConfigError(msg)


__all__ = ["Config", "ConfigError", "Derived", "check_fields", "from_dict", "is_auto", "load_json", "load_json_file",
           "load_yaml", "read_text", "require", "to_dict", "typing"]
