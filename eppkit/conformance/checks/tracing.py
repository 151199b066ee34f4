"""Tracing: the EPP's spans, if it makes any, join Envoy's trace through the gRPC metadata.

Envoy traces its ext_proc call and puts the trace context (``traceparent``) into the gRPC stream's metadata;
an EPP that extracts it makes its spans children of Envoy's call, so one request is one trace. An EPP that
does not starts a trace of its own per request (GAIE EPP v1.5.0 does; llm-d-router #2828): its time then
sits in a trace nobody finds from the request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eppkit.conformance.registry import ONE_RUN, SERVED, check
from eppkit.conformance.results import SHOULD, TRACING, failed, not_applicable, passed
from eppkit.core.polling import PollTimeout, poll
from eppkit.observability import expected_spans as ex
from eppkit.observability.contract import Service

if TYPE_CHECKING:
    from eppkit.conformance.harness import EppHarness
    from eppkit.conformance.results import Result

# Services of the kit's testbed around the EPP, never the EPP itself.
AROUND = {Service.CLIENT, Service.ENVOY, Service.VLLM, Service.PD_SIDECAR, Service.ENCODER}
EXPORT_WAIT_S = 7.0  # OTel SDKs export in batches every 5 s by default


@check("trace-context", "the EPP's spans join Envoy's trace", category=TRACING, level=SHOULD, needs=SERVED,
       source="W3C trace context in the ext_proc gRPC metadata (Envoy's tracer)", uses=(ONE_RUN,))
def trace_context(h: EppHarness) -> Result:
    """One request: spans of the EPP under Envoy's ext_proc call span pass; spans of a trace of its own (found
    by the request's time) fail; no spans at all: not applicable."""
    bed = h.bed()
    result = h.must_serve(h.send(bed), "a request").result
    call = ex.picker_call(bed.mode)
    trace = bed.wait_for_trace(result, [ex.ROOT, call] if call else [ex.ROOT], timeout_s=10)

    def joined_spans(found):
        calls = call.find(found) if call else []
        return [s for s in found.spans if s.service not in AROUND and any(s.is_descendant_of(c) for c in calls)]

    jaeger = bed.jaeger
    window = (trace.start_us - 1_000_000, trace.end_us + 2_000_000)

    def own_spans(found):
        """Spans of a service around no request (the EPP's) that are roots of traces of their own: an EPP that joins
        Envoy's traces has its earlier requests' spans in this window too, each under Envoy's call."""
        spans = []
        for service in set(jaeger.services()) - AROUND - {s.service for s in found.spans}:
            spans += [s for s in jaeger.spans_between(service, *window)
                      if s.service == service and not s.parent_id and s.trace_id != found.trace_id]
        return spans

    def look():  # the request's trace, and the EPP's spans found in it or, failing that, in traces of their own
        found = jaeger.get_trace(trace.trace_id) or trace
        joined = joined_spans(found)
        return found, joined, ([] if joined else own_spans(found))

    try:  # an EPP's exporter batches its spans (OTel's default: every 5 s): wait for them, wherever they land
        trace, joined, elsewhere = poll(look, until=lambda seen: bool(seen[1] or seen[2]), timeout_s=EXPORT_WAIT_S,
                                        interval_s=0.3, describe="the EPP's spans")
    except PollTimeout:
        joined, elsewhere = [], []
    if joined:
        return passed(f"{len(joined)} span(s) of {joined[0].service!r} under Envoy's call",
                      [f"{s.service}:{s.name} under {s.parent.label} in trace {trace.trace_id}" for s in joined[:5]])
    if elsewhere:
        return failed(f"the EPP's spans ({elsewhere[0].service}:{elsewhere[0].name}) start a trace of their own: "
                      "extract the W3C trace context from the ext_proc stream's gRPC metadata (traceparent) and "
                      "start the EPP's span as its child.",
                      [f"{s.service}:{s.name} in trace {s.trace_id}, the request's is {trace.trace_id}"
                       for s in elsewhere[:5]])
    return not_applicable("the EPP exported no spans to the testbed's Jaeger (it gets the standard OTel "
                          "environment: OTLP over gRPC to the testbed's Jaeger)")
