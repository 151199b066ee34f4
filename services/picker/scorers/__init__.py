"""Scorers, registered by type name, in the manner of the Gateway API Inference Extension's plugins.

A scorer sees the request and the candidate endpoints (healthy, serving the requested model,
never empty, in pool order) and answers a :class:`Pick`: one endpoint, the fallbacks in order,
and a reason in words (the ``epp.reason`` / ``callout.reason`` span attribute).

Each scorer type lives in its own module in this package and registers itself under its type
name, with the dataclass of its parameters when it takes any::

    TYPE = "prefix-cache-scorer"

    @dataclass(frozen=True)
    class Parameters:
        hashBlockSize: int = 64

    @register(TYPE, Parameters)
    class PrefixCacheScorer:
        def __init__(self, parameters: Parameters = Parameters()): ...
        def pick(self, request, candidates) -> Pick: ...

As with GAIE's ``plugins.Register(type, factory)``, the factory is built from an instance name and
raw parameters (a JSON object, checked against the dataclass); configuration names the type
(``--scorer prefix-cache-scorer --scorer-parameters '{"hashBlockSize": 32}'``) and code never
switches on it. Every module of this package is imported when the package is, so a new scorer
is one new file (plus its tests).

Unlike GAIE, one scorer both scores and picks (there are no weighted score sums and no separate
picker plugin): the kit compares integrations, so one clear decision rule per run is enough.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar

from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.request import LlmRequest

from eppkit.core import typed
from eppkit.core.registry import load_members


@dataclass
class Pick:
    endpoint: PoolEndpoint
    reason: str
    fallbacks: list[PoolEndpoint] = field(default_factory=list)
    # Extra figures of the decision a transport may pass on (the frontend's overlap_blocks, ...).
    details: dict[str, Any] = field(default_factory=dict)


class PoolTurns:
    """Turns counted per candidate set (per model pool): round robin's rotation, and queue-scorer's among equal loads.
    One counter over every pool would let two models asked in turn give one model's turns always to the same pod."""

    def __init__(self) -> None:
        self._turns: dict[tuple[str, ...], itertools.count] = {}

    def next(self, candidates: list[PoolEndpoint]) -> int:
        """This candidate set's next turn (0, 1, 2, ...)."""
        return next(self._turns.setdefault(tuple(ep.address for ep in candidates), itertools.count()))


class Scorer(Protocol):
    type: str  # the registered type name, e.g. "queue-scorer"
    name: str  # this instance's name (the type unless configured otherwise)

    def pick(self, request: LlmRequest, candidates: list[PoolEndpoint]) -> Pick: ...


Factory = Callable[[str, dict], Scorer]
_REGISTRY: dict[str, Factory] = {}
S = TypeVar("S")


def register(type_name: str, parameters: type | None = None) -> Callable[[type[S]], type[S]]:
    """Class decorator: register the scorer class under ``type_name``, which it gives the class as its ``type``
    and its instances' default ``name``.

    The factory reads the raw parameters into ``parameters`` (a dataclass) and calls
    ``cls(parameters)``; a class without parameters is called ``cls()`` and refuses any. The instance is then
    given the configured ``name``.
    """

    def add(cls: type[S]) -> type[S]:
        cls.type = cls.name = type_name

        def factory(name: str, raw: dict) -> Scorer:
            if parameters is None:
                if raw:
                    raise ValueError(f"scorer {type_name} takes no parameters, got {', '.join(sorted(raw))}")
                scorer = cls()
            else:
                scorer = cls(typed.read(parameters, raw, f"scorer {type_name}", "parameter"))
            scorer.name = name
            return scorer

        if type_name in _REGISTRY:
            raise ValueError(f"scorer type {type_name!r} registered twice")
        _REGISTRY[type_name] = factory
        return cls

    return add


def types() -> tuple[str, ...]:
    """Every registered scorer type, sorted."""
    return tuple(sorted(_REGISTRY))


def create(type_name: str, parameters: dict | None = None, *, name: str | None = None) -> Scorer:
    """A new scorer of ``type_name``; ValueError naming the known types or the bad parameter."""
    factory = _REGISTRY.get(type_name)
    if factory is None:
        raise ValueError(f"unknown scorer {type_name!r}; choose one of {', '.join(types())}")
    if parameters is not None and not isinstance(parameters, dict):
        raise ValueError(f"scorer {type_name} parameters must be a JSON object, got {parameters!r}")
    return factory(name or type_name, dict(parameters or {}))


load_members(__name__, __path__, group="scorers")
