"""Typed config dataclasses loaded from dicts / YAML with validation.

``from_dict(Cls, data)`` builds a (possibly nested) dataclass and raises
:class:`ConfigError` naming the offending field for unknown keys, wrong types
or values outside a ``Literal``.  Each dataclass may define ``validate()`` for
range checks; it is called after construction.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml
from dlmlab.errors import UserError

T = TypeVar("T")


class ConfigError(UserError, ValueError):
    """A bad configuration value; the message names the field."""


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
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def from_dict(cls: type[T], data: dict, where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``, validating every field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
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
    if validate is not None:
        validate()
    return obj


def to_dict(obj: Any) -> dict:
    return dataclasses.asdict(obj)


def load_yaml(cls: type[T], path: str | Path) -> T:
    """Load and validate a YAML config file into ``cls``."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}:{line} is not valid YAML ({getattr(e, 'problem', e)})") from None
    if data is None:
        data = {}
    return from_dict(cls, data)


def require(cond: bool, msg: str) -> None:
    """Raise :class:`ConfigError` with ``msg`` unless ``cond``."""
    if not cond:
        raise ConfigError(msg)


__all__ = ["ConfigError", "from_dict", "to_dict", "load_yaml", "require", "typing"]
