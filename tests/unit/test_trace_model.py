"""The trace model and assertions, on hand-made Jaeger JSON (no processes)."""

import pytest

from eppkit.observability import waterfall
from eppkit.observability.assertions import TraceAssertionError, TraceCheck
from eppkit.observability.trace_model import SpanNotFound, from_jaeger_json

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000_000  # µs


def _span(span_id, name, pid, start_ms, dur_ms, parent=None, tags=None, logs=None):
    return {
        "traceID": "t1", "spanID": span_id, "operationName": name, "processID": pid,
        "startTime": T0 + int(start_ms * 1000), "duration": int(dur_ms * 1000),
        "references": [{"refType": "CHILD_OF", "traceID": "t1", "spanID": parent}] if parent else [],
        "tags": [{"key": k, "type": "string", "value": v} for k, v in (tags or {}).items()],
        "logs": logs or [],
    }


@pytest.fixture
def trace():
    data = {
        "traceID": "t1",
        "processes": {"p1": {"serviceName": "client"}, "p2": {"serviceName": "envoy"}, "p3": {"serviceName": "vllm"}},
        "spans": [
            _span("a", "client.request", "p1", 0, 500),
            _span("b", "ingress", "p2", 2, 495, parent="a"),
            _span("c", "router pool egress", "p2", 3, 490, parent="b"),
            _span("d", "llm_request", "p3", 5, 480, parent="c", tags={"vllm.role": "both"},
                  logs=[{"timestamp": T0 + 306_000, "fields": [{"key": "event", "value": "first_token"}]}]),
            _span("e", "vllm.prefill", "p3", 6, 300, parent="d"),
            _span("f", "vllm.decode", "p3", 306, 170, parent="d"),
        ],
    }
    return from_jaeger_json(data)


def test_tree_links_children_to_parents(trace):
    llm = trace.one("llm_request")
    assert [c.name for c in llm.children] == ["vllm.prefill", "vllm.decode"]
    assert llm.parent.name == "router pool egress"
    assert trace.roots == [trace.one("client.request")]


def test_one_names_what_is_missing(trace):
    with pytest.raises(SpanNotFound, match=r"name='vllm.kv_transfer'.*holds: client:client.request"):
        trace.one("vllm.kv_transfer")


def test_find_all_filters_by_attribute(trace):
    assert len(trace.find_all("llm_request", vllm__role="both")) == 1
    assert trace.find_all("llm_request", vllm__role="prefill") == []


def test_event_time_and_duration(trace):
    llm = trace.one("llm_request")
    assert llm.event("first_token").time_us == T0 + 306_000
    assert trace.one("vllm.prefill").duration_ms == 300


def test_check_passes_on_a_correct_trace(trace):
    check = TraceCheck(trace)
    prefill, decode, llm = check.one("vllm.prefill"), check.one("vllm.decode"), check.one("llm_request")
    check.before(prefill, decode)
    check.within(prefill, llm)
    check.descendant_of(llm, check.one("client.request"))
    check.duration(prefill, 300, 5)
    check.present_once([("vllm", "vllm.prefill"), ("envoy", "ingress")])
    check.single_root(check.one("client.request"))


def test_before_fails_with_waterfall(trace):
    check = TraceCheck(trace)
    with pytest.raises(TraceAssertionError) as err:
        check.before(check.one("vllm.decode"), check.one("vllm.prefill"))
    message = str(err.value)
    assert "expected vllm:vllm.decode to end before vllm:vllm.prefill starts" in message
    assert "trace t1" in message and "█" in message  # the waterfall is attached


def test_duration_out_of_tolerance_fails(trace):
    check = TraceCheck(trace)
    with pytest.raises(TraceAssertionError, match=r"last 200.0 ± 10.0 ms, it lasted 300.0 ms"):
        check.duration(check.one("vllm.prefill"), 200, 10)


def test_within_fails_when_child_outlives_parent(trace):
    check = TraceCheck(trace)
    with pytest.raises(TraceAssertionError, match="within"):
        check.within(check.one("llm_request"), check.one("vllm.prefill"))


def test_present_once_reports_wrong_counts(trace):
    with pytest.raises(TraceAssertionError, match=r"vllm:vllm.kv_transfer x0"):
        TraceCheck(trace).present_once([("vllm", "vllm.kv_transfer")])


def test_child_of_names_actual_parent(trace):
    check = TraceCheck(trace)
    with pytest.raises(TraceAssertionError, match="its parent is envoy:router pool egress"):
        check.child_of(check.one("llm_request"), check.one("client.request"))


def test_waterfall_orders_by_depth_and_marks_events(trace):
    text = waterfall.render(trace)
    lines = text.splitlines()
    assert lines[1].startswith("client:client.request")
    assert lines[4].startswith("      vllm:llm_request")
    assert "◆" in lines[4]
    assert "vllm.role=both" in lines[4]
