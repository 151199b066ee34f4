"""The trace model and assertions, on hand-made OTLP JSON (the shape Jaeger's /api/v3 answers; no processes)."""

import pytest
from eppkit.observability import waterfall
from eppkit.observability.contract import Client, Envoy, GenAi, ResourceAttributes, Service, Stream, Vllm
from eppkit.observability.trace_model import SpanNotFound, from_otlp

from eppkit import TraceAssertionError, TraceCheck

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000_000  # µs
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


def _id(key: str) -> str:
    return key.encode().hex().rjust(16, "0")


def _value(v):
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}  # int64 as a string, as OTLP/JSON writes it
    if isinstance(v, list):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": v}


def _span(service, key, name, start_ms, dur_ms, parent=None, attributes=None, events=(), error=None):
    """One span in its own resourceSpans entry, as Jaeger's memory store answers."""
    start_ns = (T0 + int(start_ms * 1000)) * 1000
    span = {"traceId": TRACE_ID, "spanId": _id(key), "name": name, "kind": 1,
            "startTimeUnixNano": str(start_ns), "endTimeUnixNano": str(start_ns + int(dur_ms * 1e6)),
            "attributes": [{"key": k, "value": _value(v)} for k, v in (attributes or {}).items()],
            "events": [{"timeUnixNano": str((T0 + int(at_ms * 1000)) * 1000), "name": ev} for ev, at_ms in events],
            "status": {"code": 2, "message": error} if error else {}}
    if parent:
        span["parentSpanId"] = _id(parent)
    resource = {"attributes": [{"key": ResourceAttributes.SERVICE_NAME, "value": {"stringValue": service}},
                               {"key": ResourceAttributes.SERVICE_INSTANCE_ID, "value": {"stringValue": f"{service}-0"}}]}
    return {"resource": resource, "scopeSpans": [{"scope": {"name": service}, "spans": [span]}]}


@pytest.fixture
def trace():
    return from_otlp({"resourceSpans": [  # not in start order: the model sorts
        _span(Service.VLLM, "f", Vllm.DECODE, 306, 170, parent="d"),
        _span(Service.CLIENT, "a", Client.REQUEST, 0, 500),
        _span(Service.ENVOY, "b", Envoy.INGRESS, 2, 495, parent="a"),
        _span(Service.ENVOY, "c", Envoy.router("pool"), 3, 490, parent="b"),
        _span(Service.VLLM, "d", Vllm.REQUEST, 5, 480, parent="c",
              attributes={Vllm.ROLE: "both", GenAi.RESPONSE_FINISH_REASONS: ["stop"], GenAi.USAGE_PROMPT_TOKENS: 7},
              events=[(Stream.FIRST_TOKEN, 306)]),
        _span(Service.VLLM, "e", Vllm.PREFILL, 6, 300, parent="d"),
    ]})


def test_otlp_values_arrive_as_opentelemetry_made_them(trace):
    llm = trace.one(Vllm.REQUEST)
    assert llm.trace_id == TRACE_ID and llm.span_id == _id("d") and llm.parent_id == _id("c")
    assert llm.attributes[GenAi.RESPONSE_FINISH_REASONS] == ["stop"]  # an array stays an array
    assert llm.attributes[GenAi.USAGE_PROMPT_TOKENS] == 7  # int64 strings become ints
    assert llm.resource[ResourceAttributes.SERVICE_INSTANCE_ID] == "vllm-0"
    assert llm.kind == 1 and llm.scope == Service.VLLM and not llm.error


def test_error_status_and_message_are_kept():
    failed = from_otlp({"resourceSpans": [_span(Service.VLLM, "a", Vllm.REQUEST, 0, 5, error="client disconnected")]})
    span = failed.one(Vllm.REQUEST)
    assert span.error and span.status_message == "client disconnected"


def test_tree_links_children_to_parents(trace):
    llm = trace.one(Vllm.REQUEST)
    assert [c.name for c in llm.children] == [Vllm.PREFILL, Vllm.DECODE]
    assert llm.parent.name == Envoy.router("pool")
    assert trace.roots == [trace.one(Client.REQUEST)]


def test_one_names_what_is_missing(trace):
    with pytest.raises(SpanNotFound, match=r"name='vllm.kv_transfer'.*holds: client:client.request"):
        trace.one(Vllm.KV_TRANSFER)


def test_find_all_filters_by_attribute(trace):
    assert len(trace.find_all(Vllm.REQUEST, vllm__role="both")) == 1
    assert trace.find_all(Vllm.REQUEST, **{Vllm.ROLE: "prefill"}) == []


def test_event_time_and_duration(trace):
    llm = trace.one(Vllm.REQUEST)
    assert llm.event(Stream.FIRST_TOKEN).time_us == T0 + 306_000
    assert trace.one(Vllm.PREFILL).duration_ms == 300


def test_check_passes_on_a_correct_trace(trace):
    check = TraceCheck(trace)
    prefill, decode, llm = check.one(Vllm.PREFILL), check.one(Vllm.DECODE), check.one(Vllm.REQUEST)
    check.before(prefill, decode)
    check.within(prefill, llm)
    check.descendant_of(llm, check.one(Client.REQUEST))
    check.duration(prefill, 300, 5)
    check.present_once([Vllm.PREFILL, Envoy.INGRESS])
    check.single_root(check.one(Client.REQUEST))


def test_before_fails_with_waterfall(trace):
    check = TraceCheck(trace)
    with pytest.raises(TraceAssertionError) as err:
        check.before(check.one(Vllm.DECODE), check.one(Vllm.PREFILL))
    message = str(err.value)
    assert "expected vllm:vllm.decode to end before vllm:vllm.prefill starts" in message
    assert f"trace {TRACE_ID}" in message and "█" in message  # the waterfall is attached


def test_duration_out_of_tolerance_fails(trace):
    check = TraceCheck(trace)
    with pytest.raises(TraceAssertionError, match=r"last 200.0 ± 10.0 ms, it lasted 300.0 ms"):
        check.duration(check.one(Vllm.PREFILL), 200, 10)


def test_within_fails_when_child_outlives_parent(trace):
    check = TraceCheck(trace)
    with pytest.raises(TraceAssertionError, match="within"):
        check.within(check.one(Vllm.REQUEST), check.one(Vllm.PREFILL))


def test_present_once_reports_wrong_counts(trace):
    with pytest.raises(TraceAssertionError, match=r"vllm:vllm.kv_transfer x0"):
        TraceCheck(trace).present_once([Vllm.KV_TRANSFER])


def test_child_of_names_actual_parent(trace):
    check = TraceCheck(trace)
    with pytest.raises(TraceAssertionError, match="its parent is envoy:router pool egress"):
        check.child_of(check.one(Vllm.REQUEST), check.one(Client.REQUEST))


def test_waterfall_orders_by_depth_and_marks_events(trace):
    text = waterfall.render(trace)
    lines = text.splitlines()
    assert lines[1].startswith("client:client.request")
    assert lines[4].startswith("      vllm:llm_request")
    assert "◆" in lines[4]
    assert "vllm.role=both" in lines[4]


def test_the_transitional_reader_takes_otlp_and_jaegers_own_json(trace):
    from eppkit.observability.trace_model import from_jaeger_json

    otlp = {"resourceSpans": [_span(Service.VLLM, "a", Vllm.REQUEST, 0, 5)]}
    assert from_jaeger_json(otlp).one(Vllm.REQUEST).service == Service.VLLM
    jaeger = {"traceID": "t1", "processes": {"p1": {"serviceName": Service.VLLM}},
              "spans": [{"traceID": "t1", "spanID": "a", "operationName": Vllm.REQUEST, "processID": "p1",
                         "startTime": T0, "duration": 5000, "references": [], "tags": [], "logs": []}]}
    assert from_jaeger_json(jaeger).one(Vllm.REQUEST).duration_ms == 5
