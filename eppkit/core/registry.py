"""A registry of named entries (modes, flows), in the manner of GAIE's plugin registry: each entry's own
module registers it once; everything else looks entries up by name and never switches on one. :func:`load_members`
imports a registry's modules, and an outside package's through its entry points."""

from __future__ import annotations

import importlib
import pkgutil
from importlib import metadata
from typing import Generic, Protocol, TypeVar


class Named(Protocol):
    name: str
    order: int  # position in listings


E = TypeVar("E", bound=Named)


class Registry(Generic[E]):
    def __init__(self, kind: str) -> None:
        self.kind = kind  # "mode", "flow": what error messages call an entry
        self._entries: dict[str, E] = {}

    def register(self, entry: E) -> E:
        if entry.name in self._entries:
            raise ValueError(f"{self.kind} {entry.name!r} registered twice")
        self._entries[entry.name] = entry
        return entry

    def names(self) -> tuple[str, ...]:
        """Every entry's name, in listing order."""
        return tuple(e.name for e in sorted(self._entries.values(), key=lambda e: (e.order, e.name)))

    def get(self, name: str) -> E:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names())}") from None

    def all(self) -> tuple[E, ...]:
        return tuple(self.get(n) for n in self.names())


class PluginError(ImportError):
    """An outside package's entry point that does not load: which one, from which distribution, and why."""


def load_members(package: str, path, *, group: str, skip: tuple[str, ...] = (), order: tuple[str, ...] = ()) -> None:
    """Import every module of a registry's package, each registering its own entries: the modules of ``path`` (the
    package's ``__path__``) but private ones and ``skip``, those named in ``order`` first, the rest by name; then
    every entry point of the group ``eppkit.<group>`` an installed distribution declares, the way pytest loads its
    ``pytest11`` plugins, so an outside package adds its own (pyproject.toml)::

        [project.entry-points."eppkit.checks"]
        my-checks = "my_package.checks"      # a module whose import registers them
    """
    names = [m.name for m in pkgutil.iter_modules(path) if not m.name.startswith("_") and m.name not in skip]
    for name in sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n)):
        importlib.import_module(f"{package}.{name}")
    for entry in metadata.entry_points(group=f"eppkit.{group}"):
        try:
            entry.load()
        except Exception as exc:
            dist = entry.dist.name if entry.dist is not None else "an installed distribution"
            raise PluginError(f"the eppkit.{group} entry point {entry.name!r} of {dist} ({entry.value}) failed to "
                              f"load: {type(exc).__name__}: {exc}\nHint: fix or uninstall {dist}.") from exc
