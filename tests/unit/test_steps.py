"""Traces to step durations, the expected-span table, and percentiles.

Real traces under tests/unit/data/traces/ are OTLP JSON read from Jaeger's /api/v3 after one request
through a real testbed (Envoy 1.40, each mode's own span names); the synthetic ones pin the arithmetic.
"""

import statistics
from pathlib import Path

import pytest
from eppkit.observability import contract
from eppkit.observability import expected_spans as ex
from eppkit.observability import steps as st
from eppkit.observability.contract import (
    Callout,
    Client,
    Cluster,
    Dynmod,
    Encoder,
    Envoy,
    Epp,
    Frontend,
    Pd,
    Service,
    Stream,
    Vllm,
)
from eppkit.observability.trace_model import Span, SpanEvent, Trace

from eppkit import TraceCheck, flows, modes
from eppkit.compare.report import load_trace
from tests.support import kit

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "traces"
T0 = 1_700_000_000_000_000  # µs


class TraceBuilder:
    """Spans by (name, start ms, duration ms, parent key), each of the service the contract names; times from T0."""

    __test__ = False

    def __init__(self):
        self.spans: dict[str, Span] = {}

    def add(self, key, name, start_ms, dur_ms, parent=None, events=()):
        self.spans[key] = Span(
            span_id=key, trace_id="t1", name=name, service=contract.service_of(name),
            start_us=T0 + int(start_ms * 1000), duration_us=int(dur_ms * 1000), parent_id=parent,
            events=[SpanEvent(ev, T0 + int(at_ms * 1000)) for ev, at_ms in events])
        return self

    def build(self) -> Trace:
        return Trace("t1", list(self.spans.values()))


def aggregated(mode="direct", picker=None, decision=None, first_token_ms=None):
    """client 0-300; ingress 2-298; [picker call 3-13 > decision 5-6]; upstream from 15 (or 3)."""
    b = TraceBuilder()
    events = [(Stream.FIRST_TOKEN, first_token_ms)] if first_token_ms is not None else []
    b.add("root", Client.REQUEST, 0, 300, events=events)
    b.add("in", Envoy.INGRESS, 2, 296, "root")
    up_start = 3
    if picker:
        b.add("call", picker, 3, 10, "in")
        b.add("dec", decision, 5, 1.5, "call")
        up_start = 15
    b.add("up", Envoy.router(Cluster.POOL), up_start, 280, "in")
    b.add("llm", Vllm.REQUEST, up_start + 1, 275, "up")
    b.add("q", Vllm.QUEUE, up_start + 1, 0.5, "llm")
    b.add("p", Vllm.PREFILL, up_start + 2, 100, "llm")
    b.add("d", Vllm.DECODE, up_start + 102, 150, "llm")
    return b


# -- step durations ------------------------------------------------------------------------------

def test_direct_trace_has_gateway_and_vllm_steps_but_no_decision():
    steps = st.step_durations(aggregated().build(), modes.get("direct"))
    assert steps == {"e2e": 300.0, "gateway": 1.0, "queue": 0.5, "prefill": 100.0, "decode": 150.0}


@pytest.mark.parametrize("mode, picker, decision", [
    # mode            Envoy's span of the picker call                                       deciding span
    ("ext_proc", Envoy.EXT_PROC_CALL, Epp.PICK),
    ("sidecar", Envoy.EXT_PROC_CALL, Frontend.ROUTE),
    ("lua-callout", Envoy.CALLOUT_CALL, Callout.PICK),
    ("dynmod-callout", Dynmod.CALLOUT, Callout.PICK),
])
def test_picker_modes_read_decision_and_roundtrip_from_their_own_spans(mode, picker, decision):
    steps = st.step_durations(aggregated(mode, picker, decision).build(), modes.get(mode))
    assert steps["decision"] == 1.5
    assert steps["roundtrip"] == 10.0
    assert steps["gateway"] == 13.0  # ingress start 2 -> upstream start 15


def test_decision_span_of_another_mode_is_not_counted():
    trace = aggregated("ext_proc", Envoy.CALLOUT_CALL, Callout.PICK).build()
    steps = st.step_durations(trace, modes.get("ext_proc"))
    assert "decision" not in steps and "roundtrip" not in steps


def test_ttft_is_the_client_first_token_event_after_the_root_start():
    steps = st.step_durations(aggregated(first_token_ms=120.25).build(), modes.get("direct"))
    assert steps["ttft"] == pytest.approx(120.25, abs=0.001)


def test_pd_sums_queues_and_keeps_kv_transfer():
    b = TraceBuilder()
    b.add("root", Client.REQUEST, 0, 400).add("in", Envoy.INGRESS, 1, 398, "root")
    b.add("up", Envoy.router(Cluster.POOL), 2, 396, "in")
    b.add("pd", Pd.REQUEST, 3, 394, "up")
    b.add("pp", Pd.PREFILL, 4, 110, "pd").add("pl", Vllm.REQUEST, 5, 105, "pp")
    b.add("pq", Vllm.QUEUE, 5, 2, "pl").add("pf", Vllm.PREFILL, 7, 100, "pl")
    b.add("pdd", Pd.DECODE, 115, 280, "pd").add("dl", Vllm.REQUEST, 116, 278, "pdd")
    b.add("dq", Vllm.QUEUE, 116, 3, "dl").add("kv", Vllm.KV_TRANSFER, 119, 20, "dl")
    b.add("dd", Vllm.DECODE, 139, 250, "dl")
    steps = st.step_durations(b.build(), modes.get("direct"))
    assert steps["queue"] == 5.0
    assert steps["prefill"] == 100.0
    assert steps["kv"] == 20.0
    assert steps["decode"] == 250.0
    assert ex.missing(b.build(), kit.expected("direct", "pd")) == []


def test_encode_is_the_span_of_parallel_encoder_calls_not_their_sum():
    b = aggregated()
    b.add("e1", Encoder.ENCODE, 20, 30, "root").add("e2", Encoder.ENCODE, 25, 30, "root")
    assert st.step_durations(b.build(), modes.get("direct"))["encode"] == 35.0


def test_breakdown_parts_add_up_to_e2e_and_are_never_negative():
    steps = st.step_durations(aggregated("ext_proc", ex.EXT_PROC_CALL.name, Epp.PICK).build(), modes.get("ext_proc"))
    parts = st.breakdown(steps)
    assert list(parts) == list(st.BREAKDOWN)
    assert sum(parts.values()) == pytest.approx(steps["e2e"])
    assert parts["decision"] == 1.5 and parts["picker call"] == 8.5 and parts["envoy"] == 3.0
    assert all(v >= 0 for v in st.breakdown({"e2e": 1.0, "prefill": 5.0, "gateway": 0.1, "roundtrip": 0.5}).values())


# -- real traces (read back from real testbeds) ----------------------------------------------------

@pytest.mark.parametrize("file, mode, flow, media, decision_span", [
    ("chat-ext_proc", "ext_proc", "aggregated", 0, Epp.PICK),
    ("chat-lua-callout", "lua-callout", "aggregated", 0, Callout.PICK),
    ("stream-direct", "direct", "aggregated", 0, None),
    ("multimodal-sidecar", "sidecar", "epd", 3, Frontend.ROUTE),
    ("pd-dynmod-callout", "dynmod-callout", "pd", 0, Callout.PICK),
])
def test_real_traces_are_complete_and_their_steps_match_their_spans(file, mode, flow, media, decision_span):
    trace = load_trace(DATA / f"{file}.json")
    assert ex.missing(trace, kit.expected(mode, flow, media)) == []
    path = TraceCheck(trace).request_path(mode)
    assert path.backend.name == (Vllm.REQUEST if flow == "aggregated" else Pd.REQUEST)
    assert (path.decision.name if path.decision else None) == decision_span
    steps = st.step_durations(trace, modes.get(mode))
    root = trace.one(Client.REQUEST, Service.CLIENT)
    assert steps["e2e"] == root.duration_ms
    if decision_span:
        assert steps["decision"] == trace.one(decision_span).duration_ms
        # (the ext_proc stream may close just after the upstream starts: roundtrip vs gateway is open)
        assert 0 < steps["decision"] < steps["roundtrip"] < steps["e2e"]
        assert 0 < steps["gateway"] < steps["e2e"]
        before_upstream = st.breakdown(steps)
        assert sum(before_upstream[p] for p in ("decision", "picker call", "envoy")) == pytest.approx(steps["gateway"])
    else:
        assert "decision" not in steps and "roundtrip" not in steps
    assert steps["prefill"] == sum(s.duration_ms for s in trace.find_all(Vllm.PREFILL, Service.VLLM))
    if file == "stream-direct":
        assert 0 < steps["ttft"] < steps["e2e"]


def test_a_missing_span_is_named_and_a_short_count_says_how_many():
    trace = load_trace(DATA / "pd-dynmod-callout.json")
    trace.spans = [s for s in trace.spans if s.name != Callout.PICK]
    queue = [s for s in trace.spans if s.name == Vllm.QUEUE]
    trace.spans.remove(queue[0])
    assert ex.missing(trace, kit.expected("dynmod-callout", "pd")) == ["callout:callout.pick", "vllm:vllm.queue (1 of 2)"]
    assert ex.missing(None, [ex.ROOT]) == ["client:client.request"]


def test_epd_expects_one_encode_per_media_item():
    trace = load_trace(DATA / "multimodal-sidecar.json")
    assert ex.missing(trace, kit.expected("sidecar", "epd", media_items=4)) == [
        "pd-sidecar:pd.encode (3 of 4)", "encoder:encoder.encode (3 of 4)"]


def test_every_mode_and_flow_has_expected_spans_rooted_at_the_client_and_unknown_names_are_refused():
    for mode in modes.names():
        for flow in flows.names():
            assert kit.expected(mode, flow)[:3] == (ex.ROOT, ex.INGRESS, ex.UPSTREAM)
    with pytest.raises(ValueError, match="unknown flow 'nope'"):
        kit.expected("direct", "nope")
    with pytest.raises(ValueError, match="unknown mode 'nope'"):
        kit.expected("nope", "aggregated")
    with pytest.raises(ValueError, match="choose one of"):
        kit.expected("direct", "aggregated", backend_spans="most")


# -- percentiles ----------------------------------------------------------------------------------

@pytest.mark.parametrize("values", [[5.0], [3.0, 1.0], [1.0, 2.0, 10.0], [4.0, 1.0, 3.0, 2.0, 8.5, 0.25]])
def test_p50_is_the_median(values):
    assert st.percentile(values, 50) == statistics.median(values)


def test_percentiles_interpolate_between_ranks_and_span_min_to_max():
    values = list(range(1, 11))  # 1..10
    assert st.percentile(values, 0) == 1 and st.percentile(values, 100) == 10
    assert st.percentile(values, 90) == pytest.approx(9.1)
    assert st.percentile([], 50) is None
    summary = st.summarize([1.0, 2.0, 3.0, 4.0])
    assert summary == {"n": 4, "p50": 2.5, "p90": 3.7, "p99": 3.97, "mean": 2.5, "min": 1.0, "max": 4.0}


def test_e_plus_pd_expects_one_vllm_that_prefills_and_decodes_behind_the_sidecar():
    labels = {r.label: r.count for r in kit.expected("ext_proc", "epd", media_items=2, prefill=0)}
    assert labels["vllm:llm_request"] == 1 and "vllm:vllm.kv_transfer" not in labels
    assert "pd-sidecar:pd.prefill" not in labels and labels["pd-sidecar:pd.decode"] == 1
    assert labels["pd-sidecar:pd.encode"] == 2 and labels["encoder:encoder.encode"] == 2
    with_prefill = {r.label: r.count for r in kit.expected("ext_proc", "epd", media_items=2)}
    assert with_prefill["vllm:llm_request"] == 2 and "vllm:vllm.kv_transfer" in with_prefill
