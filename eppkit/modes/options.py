"""Typed mode options: each mode declares a dataclass; ``Topology.options`` (a dict) is read into it.

An unknown option is an error naming the valid ones, and a value of the wrong type is an error
naming the option, before anything starts. ``eppkit up`` / ``eppkit run`` set options with
``--set key=value`` (repeatable): the value is read as JSON when it parses (``--set
failure_mode_allow=true``, ``--set scorer_parameters='{"hashBlockSize": 32}'``), else taken as a
string (``--set scorer=round-robin``).

The picker modes' options include the picker core's settings
(:class:`eppkit.services.picker.settings.PickerSettings`): their defaults are the services' defaults.
"""

from __future__ import annotations

import json
import typing
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from eppkit.core import typed
from eppkit.services.picker.settings import PickerSettings


@dataclass
class CommonOptions:
    """Options every mode takes."""

    # False: Envoy renders no tracer and the services export nothing (a benchmark prices tracing itself).
    tracing: bool = True
    # The body-based model router in front: one pool per backend model, the picker picks within it.
    body_routing: bool = False
    # Envoy's bounds on a slow or short client, in seconds (HCM request_headers_timeout / request_timeout;
    # 0 turns one off): the headers complete within the first of their first byte, the whole upload
    # within the second. Past either, Envoy answers 408. A slow backend is not bounded by these.
    request_headers_timeout_s: float = 10.0
    request_timeout_s: float = 60.0
    # How long each service (a mock, a picker, an EPP of your own) may take to answer its readiness check
    # before the testbed gives up and says which one, with its log's last lines.
    ready_timeout_s: float = 30.0


@dataclass
class FailOpenOptions:
    """Options of every mode whose picker can be down."""

    # Envoy's answer when the picker cannot be reached: route round-robin over the pool (True) or fail (False).
    failure_mode_allow: bool = False


@dataclass
class PickerOptions(CommonOptions, PickerSettings, FailOpenOptions):
    """Options of every mode with a kit picker: the common ones and the picker core's settings."""


O = TypeVar("O")


def read_options(cls: type[O], raw: dict[str, Any], mode: str) -> O:
    """``raw`` as ``cls``: ValueError naming an unknown option (with the valid ones) or a wrongly typed value."""
    return typed.read(cls, raw, f"mode {mode}")


def describe(cls: type) -> list[tuple[str, str, Any]]:
    """(name, type, default) of every option of ``cls``, for help texts and docs."""
    hints = typing.get_type_hints(cls)
    defaults = asdict(cls())
    return [(f.name, getattr(hints[f.name], "__name__", str(hints[f.name])), defaults[f.name]) for f in fields(cls)]


def parse_set(items: list[str]) -> dict[str, Any]:
    """``["key=value", ...]`` (``--set``) as a dict; the value as JSON when it parses, else the string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected key=value")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        out[key.strip()] = value
    return out


__all__ = ["CommonOptions", "FailOpenOptions", "PickerOptions", "read_options", "describe", "parse_set", "field"]
