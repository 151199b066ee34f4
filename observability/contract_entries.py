"""How the trace contract (:mod:`eppkit.observability.contract`) declares a name: an :class:`Entry` of one kind
(service, resource attribute, span, span event, attribute) with its one-line description, added once (a second
declaration of a kind and name is an error); each declarer returns the name, the plain string a contract class holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

SERVICE, RESOURCE, SPAN, EVENT, ATTRIBUTE = "service", "resource attribute", "span", "span event", "attribute"


@dataclass(frozen=True)
class Entry:
    """One name of the contract."""

    kind: str
    name: str
    doc: str
    service: str = ""  # spans: the service.name that emits it
    attributes: tuple[str, ...] = ()  # spans and events: the attributes they may carry
    events: tuple[str, ...] = ()  # spans: the events they may carry
    semconv: bool = False  # an OpenTelemetry semantic-convention name
    origin: str = "eppkit"  # whose name it is: eppkit, OpenTelemetry, vLLM, Envoy

    @property
    def pattern(self) -> re.Pattern | None:
        """Names with ``{placeholders}`` (Envoy's ``router {cluster} egress``) match as a pattern."""
        if "{" not in self.name:
            return None
        return re.compile("^" + re.sub(r"\\\{[a-z_]+\\\}", ".+", re.escape(self.name)) + "$")


_ENTRIES: list[Entry] = []  # in the order declared


def add(entry: Entry) -> str:
    """``entry`` added (a second of one kind and name is an error); its name, the constant a class holds."""
    if any(e.kind == entry.kind and e.name == entry.name for e in _ENTRIES):
        raise ValueError(f"{entry.kind} {entry.name!r} declared twice")
    _ENTRIES.append(entry)
    return entry.name


def service(name: str, doc: str) -> str:
    return add(Entry(SERVICE, name, doc))


def resource(name: str, doc: str) -> str:
    return add(Entry(RESOURCE, name, doc, semconv=True, origin="OpenTelemetry"))


def attribute(name: str, doc: str, *, semconv: bool = False, origin: str = "eppkit") -> str:
    return add(Entry(ATTRIBUTE, name, doc, semconv=semconv, origin="OpenTelemetry" if semconv else origin))


def event(name: str, doc: str, attributes: Iterable[str] = ()) -> str:
    return add(Entry(EVENT, name, doc, attributes=tuple(attributes)))


def span(name: str, service: str, doc: str, attributes: Iterable[str] = (), events: Iterable[str] = (),
          origin: str = "eppkit") -> str:
    return add(Entry(SPAN, name, doc, service=service, attributes=tuple(attributes), events=tuple(events),
                      origin=origin))


def declared() -> tuple[Entry, ...]:
    """Every entry declared so far, in order (the contract's, once :mod:`eppkit.observability.contract` is imported)."""
    return tuple(_ENTRIES)
