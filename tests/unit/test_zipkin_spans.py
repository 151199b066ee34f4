"""Traces as Zipkin v2 JSON: what Zipkin's UI shows must say what the trace says."""

import json
from pathlib import Path

import pytest
from eppkit.observability import zipkin_spans
from eppkit.observability.trace_model import Span, SpanEvent, Trace

from eppkit.compare import report as rp

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "traces"
SAVED = sorted(DATA.glob("*.json"))
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


def span(span_id, name, service="vllm", parent=None, start=1_000, duration=500, **kw):
    return Span(span_id=span_id, trace_id=TRACE_ID, name=name, service=service, start_us=start,
                duration_us=duration, parent_id=parent, **kw)


@pytest.mark.parametrize("path", SAVED, ids=[p.stem for p in SAVED])
def test_every_span_of_a_saved_trace_converts_with_its_tree_and_times(path):
    trace = rp.load_trace(path)
    out = zipkin_spans.spans(trace)
    assert len(out) == len(trace.spans)
    by_id = {s["id"]: s for s in out}
    assert len(by_id) == len(out), "span ids stay unique"
    for original in trace.spans:
        z = by_id[original.span_id.rjust(16, "0")]
        assert len(z["traceId"]) == 32 and len(z["id"]) == 16
        assert z["timestamp"] == original.start_us and z["duration"] == max(1, original.duration_us)
        assert z["localEndpoint"] == {"serviceName": original.service}
        assert z.get("parentId") == (original.parent_id.rjust(16, "0") if original.parent_id else None)
        assert all(isinstance(v, str) for v in z["tags"].values()), "Zipkin tags are strings"
        assert not any(k.startswith("telemetry.sdk.") for k in z["tags"])
        assert {"span.kind", "internal.span.format"}.isdisjoint(z["tags"]), "the reader's own tags are fields"
        for key, value in original.resource.items():
            if key != "service.name" and not key.startswith("telemetry.sdk."):
                assert z["tags"][key] == zipkin_spans.tag_value(value), "resource attributes are kept as tags"
        assert [a["value"].split(" ")[0] for a in z.get("annotations", [])] == [e.name for e in original.events]
    json.dumps(out)  # the body of POST /api/v2/spans


def test_two_replicas_of_one_service_stay_apart_by_their_instance_tag():
    trace = rp.load_trace(DATA / "chat-ext_proc.json")
    vllm = [s for s in zipkin_spans.spans(trace) if s["localEndpoint"]["serviceName"] == "vllm"]
    assert vllm and all(s["tags"]["service.instance.id"].startswith("vllm-") for s in vllm)


def test_kinds_tags_events_and_errors():
    root = span("00000000000000a1", "client.request", "client", start=1_000, duration=9_000,
                attributes={"span.kind": "client", "http.response.status_code": 503, "flag": True,
                            "gen_ai.response.finish_reasons": ["length"], "ratio": 0.25},
                events=[SpanEvent("first_token", 2_500), SpanEvent("chunk", 2_000, {"n": 3, "a": "x"})],
                resource={"service.name": "client", "service.instance.id": "c-1", "telemetry.sdk.name": "opentelemetry"})
    failed = span("00000000000000b2", "vllm.decode", parent="00000000000000a1", start=3_000, duration=0,
                  attributes={"span.kind": "internal", "otel.status_description": "backend died", "otel.scope.name": "vllm"},
                  error=True)
    server = span("c3", "ingress", "envoy", parent="00000000000000a1", attributes={"span.kind": "server"})
    out = {s["name"]: s for s in zipkin_spans.spans(Trace(TRACE_ID, [root, failed, server]))}

    client = out["client.request"]
    assert client["kind"] == "CLIENT" and "parentId" not in client
    assert client["tags"] == {"service.instance.id": "c-1", "http.response.status_code": "503", "flag": "true",
                              "gen_ai.response.finish_reasons": '["length"]', "ratio": "0.25"}
    assert client["annotations"] == [{"timestamp": 2_000, "value": 'chunk {"a":"x","n":3}'},
                                     {"timestamp": 2_500, "value": "first_token"}]
    decode = out["vllm.decode"]
    assert "kind" not in decode, "Zipkin expects no kind on internal spans"
    assert decode["duration"] == 1, "Zipkin drops a zero duration"
    assert decode["tags"]["error"] == "backend died" and decode["tags"]["otel.scope.name"] == "vllm"
    assert decode["parentId"] == "00000000000000a1"
    assert out["ingress"]["kind"] == "SERVER" and out["ingress"]["id"] == "00000000000000c3", "ids are padded to 64 bits"


def test_a_failed_span_without_a_message_still_carries_the_error_tag():
    out = zipkin_spans.span(span("00000000000000d4", "epp.pick", "epp", error=True))
    assert out["tags"]["error"] == "ERROR"
