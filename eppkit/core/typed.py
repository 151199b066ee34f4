"""A JSON object read into a dataclass, checked: the one reader of the kit's typed settings (a mode's options,
:mod:`eppkit.modes.options`; a scorer's parameters, :mod:`eppkit.services.picker.scorers`).

An unknown key is a ValueError naming the valid ones, and a value of the wrong type one naming the key, before
anything uses them. Standard library only: the services import it too."""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def accepts(annotation: Any, value: Any) -> bool:
    """Whether ``value`` (from JSON) is of the type ``annotation`` says (a bool is no number; an int is a float)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(accepts(arg, value) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is Any:
        return True
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, origin or annotation)


def read(cls: type[T], raw: dict[str, Any], owner: str, item: str = "option") -> T:
    """``raw`` as the dataclass ``cls``; ValueError saying ``owner`` (``"mode ext_proc"``) and naming an unknown
    ``item`` (with the valid ones) or a wrongly typed value."""
    hints = typing.get_type_hints(cls)
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"{owner}: unknown {item}(s) {', '.join(unknown)}; valid: {', '.join(sorted(known)) or 'none'}")
    for key, value in raw.items():
        if not accepts(hints[key], value):
            kind = getattr(hints[key], "__name__", str(hints[key]))
            raise ValueError(f"{owner}: {item} {key} must be {kind}, got {value!r}")
    return cls(**{k: (float(v) if hints[k] is float else v) for k, v in raw.items()})
