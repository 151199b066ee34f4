"""A trace as Zipkin v2 JSON spans: the body of ``POST /api/v2/spans``, what Zipkin's UI reads.

Built from the trace model (:class:`~eppkit.observability.trace_model.Trace`), not from any
Jaeger answer, so it does not care how the trace was read.

| Zipkin | from the span |
|---|---|
| ``traceId``, ``id``, ``parentId`` | as they are (128-bit trace id, 64-bit span ids, lowercase hex) |
| ``name`` | the span name (Zipkin lower-cases it on ingest) |
| ``kind`` | SERVER, CLIENT, PRODUCER, CONSUMER; internal spans carry none, as Zipkin expects |
| ``timestamp``, ``duration`` | microseconds; a duration of at least 1 (Zipkin drops 0) |
| ``localEndpoint.serviceName`` | the service |
| ``tags`` | resource attributes but ``service.name`` and ``telemetry.sdk.*`` (so ``service.instance.id``
             keeps vllm-0 and vllm-1 apart), the instrumentation scope, then the span's attributes; every
             value a string (lists and maps as compact JSON) |
| ``annotations`` | events: ``name``, or ``name {"key":value}`` when the event has attributes |
| ``error`` tag | the status message (or ``ERROR``) of a failed span; Zipkin's UI marks the span red |
"""

from __future__ import annotations

import json
from typing import Any

from eppkit.observability.trace_model import Span, Trace

# OTLP SpanKind numbers and the names Jaeger's JSON gives them, to Zipkin's kinds.
_KINDS = {2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER",
          "server": "SERVER", "client": "CLIENT", "producer": "PRODUCER", "consumer": "CONSUMER"}
# Tags Jaeger adds when it turns OTLP into its own JSON; Zipkin has fields for what they say.
_READER_TAGS = {"span.kind", "error", "internal.span.format", "otel.status_code", "otel.status_description",
                "otel.scope.name"}
_DROPPED_RESOURCE_PREFIXES = ("telemetry.sdk.",)


def tag_value(value: Any) -> str:
    """Zipkin tags are strings: booleans as true/false, numbers as Python prints them, the rest JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def _hex(value: str, width: int) -> str:
    return value.lower().rjust(width, "0")


def _kind(span: Span) -> str | None:
    return _KINDS.get(getattr(span, "kind", 0) or span.attributes.get("span.kind"))


def _tags(span: Span) -> dict[str, str]:
    tags = {k: tag_value(v) for k, v in span.resource.items()
            if k != "service.name" and not k.startswith(_DROPPED_RESOURCE_PREFIXES)}
    scope = getattr(span, "scope", "") or span.attributes.get("otel.scope.name")
    if scope:
        tags["otel.scope.name"] = str(scope)
    tags.update({k: tag_value(v) for k, v in span.attributes.items() if k not in _READER_TAGS})
    if span.error:
        message = getattr(span, "status_message", "") or span.attributes.get("otel.status_description")
        tags["error"] = str(message or "ERROR")
    return tags


def _annotation(name: str, time_us: int, attributes: dict[str, Any]) -> dict:
    value = name
    if attributes:
        value += " " + json.dumps(dict(sorted(attributes.items())), separators=(",", ":"), default=str)
    return {"timestamp": time_us, "value": value}


def span(s: Span) -> dict:
    """One span as Zipkin v2 JSON."""
    out: dict[str, Any] = {
        "traceId": _hex(s.trace_id, 32 if len(s.trace_id) > 16 else 16),
        "id": _hex(s.span_id, 16),
        "name": s.name or "unknown",
        "timestamp": int(s.start_us),
        "duration": max(1, int(s.duration_us)),
        "localEndpoint": {"serviceName": s.service or "unknown"},
        "tags": _tags(s),
    }
    if s.parent_id and s.parent_id != s.span_id:
        out["parentId"] = _hex(s.parent_id, 16)
    kind = _kind(s)
    if kind:
        out["kind"] = kind
    if s.events:
        out["annotations"] = sorted((_annotation(e.name, e.time_us, e.attributes) for e in s.events),
                                    key=lambda a: a["timestamp"])
    return out


def spans(trace: Trace) -> list[dict]:
    """Every span of ``trace`` as Zipkin v2 JSON, in the trace's order."""
    return [span(s) for s in trace.spans]
