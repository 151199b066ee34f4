"""A registry of named entries (modes, flows), in the manner of GAIE's plugin registry: each entry's own
module registers it once; everything else looks entries up by name and never switches on one."""

from __future__ import annotations

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
