"""A trace as a tree of spans that tests can ask questions of.

Built from OTLP (what Jaeger's ``/api/v3/traces/{id}`` answers, and what trace files hold), so
status, events and array attributes are the ones OpenTelemetry made. Times are microseconds
since the epoch; helpers give milliseconds. Lookups fail with a message naming what was not
found and listing what the trace does hold.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from eppkit.observability.contract import Envoy, ResourceAttributes
from google.protobuf import json_format
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status, TracesData


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
    resource: dict[str, Any] = field(default_factory=dict)  # service.instance.id ...
    error: bool = False
    status_message: str = ""
    kind: int = 0  # OTLP SpanKind: 1 internal, 2 server, 3 client, ...
    scope: str = ""  # the instrumentation scope (tracer) name
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

    def walk(self) -> Iterator[tuple[Span, int]]:
        """Every span with its depth, parents before children, siblings by start time (a waterfall's rows)."""
        def visit(span: Span, depth: int) -> Iterator[tuple[Span, int]]:
            yield span, depth
            for child in sorted(span.children, key=lambda s: s.start_us):
                yield from visit(child, depth + 1)

        for root in sorted(self.roots, key=lambda s: s.start_us):
            yield from visit(root, 0)


def _describe_query(name, service, attrs) -> str:
    parts = []
    if service:
        parts.append(f"service={service!r}")
    if name:
        parts.append(f"name={name!r}")
    parts += [f"{k.replace('__', '.')}={v!r}" for k, v in attrs.items()]
    return "(" + ", ".join(parts) + ")"


# -- OTLP JSON (Jaeger's /api/v3/traces/{id} ``result``, trace files) -> Trace ------------------------

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _ids_as_base64(value: Any) -> Any:
    """OTLP/JSON writes ids as hex; protobuf's JSON mapping of bytes fields wants base64."""
    if isinstance(value, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_FIELDS and isinstance(v, str) else
                    _ids_as_base64(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_ids_as_base64(v) for v in value]
    return value


def traces_data(otlp_json: dict) -> TracesData:
    """OTLP JSON (``{"resourceSpans": [...]}``) as the protobuf message OpenTelemetry defines."""
    return json_format.ParseDict(_ids_as_base64(otlp_json), TracesData(), ignore_unknown_fields=True)


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return None if which is None else getattr(value, which)


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def from_otlp(data: TracesData | dict) -> Trace:
    """Build a :class:`Trace` from OTLP: a ``TracesData`` message or its JSON (one trace's spans)."""
    if isinstance(data, dict):
        data = traces_data(data)
    spans = []
    for resource_spans in data.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = resource.get(ResourceAttributes.SERVICE_NAME, "?")
        for scope_spans in resource_spans.scope_spans:
            for raw in scope_spans.spans:
                start_us, end_us = raw.start_time_unix_nano // 1000, raw.end_time_unix_nano // 1000
                attributes = _attributes(raw.attributes)
                spans.append(Span(
                    span_id=raw.span_id.hex(), trace_id=raw.trace_id.hex(), name=raw.name, service=service,
                    start_us=start_us, duration_us=end_us - start_us, parent_id=raw.parent_span_id.hex() or None,
                    attributes=attributes,
                    events=[SpanEvent(e.name, e.time_unix_nano // 1000, _attributes(e.attributes)) for e in raw.events],
                    resource=resource,
                    # Envoy's tracing marks failures with its "error" tag as well as the status.
                    error=raw.status.code == Status.STATUS_CODE_ERROR or attributes.get(Envoy.ERROR) in (True, "true"),
                    status_message=raw.status.message, kind=raw.kind, scope=scope_spans.scope.name,
                ))
    return Trace(trace_id=spans[0].trace_id if spans else "", spans=spans)


def from_jaeger_json(data: dict) -> Trace:
    """Transitional: eppkit/compare/ and bench/overhead.py still call this name.

    compare.py hands it what JaegerClient.get_trace_json returns (OTLP JSON now); bench/overhead.py
    one element of the internal ``/api/traces`` search answer (Jaeger's own JSON, attributes rebuilt
    from tags and logs). Remove it, and the Jaeger-JSON reading below, once both use from_otlp and
    the /api/v3 query API.
    """
    if "resourceSpans" in data:
        return from_otlp(data)
    processes = data.get("processes", {})
    spans = []
    for raw in data.get("spans", []):
        proc = processes.get(raw.get("processID"), {})
        attrs = {t["key"]: t.get("value") for t in raw.get("tags", [])}
        parent_id = next((ref["spanID"] for ref in raw.get("references", [])
                          if ref.get("refType") == "CHILD_OF" and ref.get("traceID") == raw["traceID"]), None)
        events = [SpanEvent(name=next((f["value"] for f in log.get("fields", []) if f["key"] == "event"), ""),
                            time_us=int(log["timestamp"]),
                            attributes={f["key"]: f["value"] for f in log.get("fields", []) if f["key"] != "event"})
                  for log in raw.get("logs", [])]
        spans.append(Span(span_id=raw["spanID"], trace_id=raw["traceID"], name=raw["operationName"],
                          service=proc.get("serviceName", "?"), start_us=int(raw["startTime"]),
                          duration_us=int(raw["duration"]), parent_id=parent_id, attributes=attrs, events=events,
                          resource={t["key"]: t.get("value") for t in proc.get("tags", [])},
                          error=attrs.get("error") in (True, "true") or attrs.get("otel.status_code") == "ERROR"))
    return Trace(trace_id=data.get("traceID", spans[0].trace_id if spans else ""), spans=spans)
