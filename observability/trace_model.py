"""A Jaeger trace as a tree of spans that tests can ask questions of.

Times are microseconds since the epoch, as Jaeger stores them; helpers give
milliseconds. Lookups fail with a message naming what was not found and listing
what the trace does hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator


class SpanNotFound(AssertionError):
    pass


@dataclass
class SpanEvent:
    name: str
    time_us: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Span:
    span_id: str
    trace_id: str
    name: str
    service: str
    start_us: int
    duration_us: int
    parent_id: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    error: bool = False
    children: list["Span"] = field(default_factory=list, repr=False)
    parent: "Span | None" = field(default=None, repr=False)

    @property
    def end_us(self) -> int:
        return self.start_us + self.duration_us

    @property
    def duration_ms(self) -> float:
        return self.duration_us / 1000.0

    @property
    def label(self) -> str:
        return f"{self.service}:{self.name}"

    def event(self, name: str) -> SpanEvent:
        for ev in self.events:
            if ev.name == name:
                return ev
        raise SpanNotFound(f"span {self.label} has no event {name!r}; it has {[e.name for e in self.events]}")

    def ancestors(self) -> Iterator["Span"]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def descendants(self) -> Iterator["Span"]:
        for child in self.children:
            yield child
            yield from child.descendants()

    def is_descendant_of(self, other: "Span") -> bool:
        return any(a is other for a in self.ancestors())


@dataclass
class Trace:
    trace_id: str
    spans: list[Span]

    def __post_init__(self) -> None:
        self.spans.sort(key=lambda s: (s.start_us, -s.duration_us))
        by_id = {s.span_id: s for s in self.spans}
        for span in self.spans:
            span.children = []
        for span in self.spans:
            parent = by_id.get(span.parent_id) if span.parent_id else None
            span.parent = parent
            if parent is not None:
                parent.children.append(span)

    @property
    def roots(self) -> list[Span]:
        return [s for s in self.spans if s.parent is None]

    @property
    def start_us(self) -> int:
        return min(s.start_us for s in self.spans)

    @property
    def end_us(self) -> int:
        return max(s.end_us for s in self.spans)

    def services(self) -> set[str]:
        return {s.service for s in self.spans}

    def find_all(self, name: str | None = None, service: str | None = None, **attrs: Any) -> list[Span]:
        """Spans matching name and/or service and every given attribute (dots as ``__``)."""
        out = []
        for span in self.spans:
            if name is not None and span.name != name:
                continue
            if service is not None and span.service != service:
                continue
            if any(span.attributes.get(k.replace("__", ".")) != v for k, v in attrs.items()):
                continue
            out.append(span)
        return out

    def one(self, name: str | None = None, service: str | None = None, **attrs: Any) -> Span:
        """Exactly one matching span, or an error that names the query and lists the trace."""
        found = self.find_all(name, service, **attrs)
        if len(found) != 1:
            what = _describe_query(name, service, attrs)
            raise SpanNotFound(
                f"expected exactly one span {what}, found {len(found)}; the trace holds: "
                + ", ".join(sorted({s.label for s in self.spans}))
            )
        return found[0]

    def count(self, name: str | None = None, service: str | None = None) -> int:
        return len(self.find_all(name, service))

    def missing(self, expected: Iterable[tuple[str, str]]) -> list[str]:
        """Which (service, name) pairs are absent."""
        return [f"{svc}:{name}" for svc, name in expected if not self.find_all(name, svc)]


def _describe_query(name, service, attrs) -> str:
    parts = []
    if service:
        parts.append(f"service={service!r}")
    if name:
        parts.append(f"name={name!r}")
    parts += [f"{k.replace('__', '.')}={v!r}" for k, v in attrs.items()]
    return "(" + ", ".join(parts) + ")"


# -- Jaeger JSON (query API /api/traces/{id}) -> Trace ------------------------------------

def _tag_value(tag: dict) -> Any:
    return tag.get("value")


def from_jaeger_json(data: dict) -> Trace:
    """Build a :class:`Trace` from one element of Jaeger's ``/api/traces`` ``data`` list."""
    processes = data.get("processes", {})
    spans = []
    for raw in data.get("spans", []):
        proc = processes.get(raw.get("processID"), {})
        attrs = {t["key"]: _tag_value(t) for t in raw.get("tags", [])}
        parent_id = None
        for ref in raw.get("references", []):
            if ref.get("refType") == "CHILD_OF" and ref.get("traceID") == raw["traceID"]:
                parent_id = ref["spanID"]
                break
        events = [
            SpanEvent(
                name=next((f["value"] for f in log.get("fields", []) if f["key"] == "event"), ""),
                time_us=int(log["timestamp"]),
                attributes={f["key"]: f["value"] for f in log.get("fields", []) if f["key"] != "event"},
            )
            for log in raw.get("logs", [])
        ]
        error = attrs.get("error") in (True, "true") or attrs.get("otel.status_code") == "ERROR"
        spans.append(
            Span(
                span_id=raw["spanID"],
                trace_id=raw["traceID"],
                name=raw["operationName"],
                service=proc.get("serviceName", "?"),
                start_us=int(raw["startTime"]),
                duration_us=int(raw["duration"]),
                parent_id=parent_id,
                attributes=attrs,
                events=events,
                resource={t["key"]: _tag_value(t) for t in proc.get("tags", [])},
                error=error,
            )
        )
    return Trace(trace_id=data.get("traceID", spans[0].trace_id if spans else ""), spans=spans)
