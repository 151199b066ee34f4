"""The client goes away mid-request, in every mode: the upstream request is cancelled (the mock
counts it in ``eppkit_mock_client_cancellations_total``), and no span stays open — the mock's
``llm_request`` reaches Jaeger, ended, with ERROR "client disconnected".

Two moments: while the backend prefills (no byte of the answer sent yet) and while it streams
tokens. In P/D the pd-sidecar sits between Envoy and the decoder; the cancellation must cross it.
"""

import pytest
from eppkit.observability.contract import Envoy, GenAi, Pd, Service, Vllm

from eppkit import TraceCheck
from eppkit.core.polling import poll
from tests.support import kit
from tests.support.reliability import (
    MODES,
    TRAITS,
    HangUp,
    SpanSource,
    Stream,
    assert_kit_healthy,
    chat_body,
    counter,
    topology,
)

pytestmark = pytest.mark.e2e

CANCELLED = "eppkit_mock_client_cancellations_total"
LONG_STREAM = {"max_tokens": 200, "stream": True}
SLOW_TOKENS = {"x-mock-itl-ms": "30", "x-mock-decode-itl-ms": "30"}  # (decode-: through the pd-sidecar)


def _cancellations(bed) -> float:
    return sum(counter(h.url, CANCELLED) for name, h in bed.services.items() if name.startswith("vllm"))


def _running(bed) -> float:
    return sum(counter(h.url, "vllm:num_requests_running") for name, h in bed.services.items() if name.startswith("vllm"))


def _check_cancelled_trace(bed, trace_id: str, mode: str, flow: str, *, decoded: bool):
    """Every span of the request arrived, ended; the mock's request ends cancelled."""
    traits = TRAITS[mode]
    expected = [(r.service, r.name) for r in kit.expected(mode, flow)
                if not r.prefix and r.name not in (Vllm.DECODE, Pd.DECODE, Vllm.KV_TRANSFER)]
    trace = bed.jaeger.wait_for_trace(trace_id, expected + [traits.upstream], quiet_s=1.0)
    check = TraceCheck(trace)
    cancelled = [s for s in check.all(Vllm.REQUEST, Service.VLLM) if s.attributes.get(Vllm.CANCELLED)]
    assert len(cancelled) == 1, "exactly one mock request was cancelled:\n" + \
        "\n".join(f"{s.label} {s.attributes}" for s in check.all(Vllm.REQUEST, Service.VLLM))
    llm = cancelled[0]
    assert llm.error and llm.status_message == "client disconnected", (llm.status_message, llm.attributes)
    assert llm.attributes.get(GenAi.RESPONSE_FINISH_REASONS) == ["abort"], llm.attributes  # an OTLP array
    llm.event(Vllm.CLIENT_CANCELLED)
    assert [c.name for c in llm.children if c.name == Vllm.DECODE] == ([Vllm.DECODE] if decoded else [])
    check.within(llm, check.one(Envoy.INGRESS, Service.ENVOY), slack_ms=1500)  # Envoy's span ends at the reset too
    assert check.one(Envoy.INGRESS, Service.ENVOY).attributes.get(Envoy.RESPONSE_FLAGS) == "DC", "downstream connection terminated"
    return check


@pytest.mark.eppkit_needs_mock("steers the mock with x-mock-* headers; reads the mock's vllm spans")
@pytest.mark.parametrize("mode", MODES)
def test_client_gone_during_prefill_and_during_decode_cancels_upstream(eppkit_testbed_factory, mode):
    bed = eppkit_testbed_factory(topology(mode))
    spans = SpanSource(bed.otlp_endpoint, mode)
    try:
        # 1. during prefill: nothing of the answer has been written yet
        before = _cancellations(bed)
        call = HangUp(bed, spans, chat_body(**LONG_STREAM), headers={"x-mock-ttft-ms": "3000"})
        poll(lambda: _running(bed) == 1, timeout_s=10, describe="the backend prefilling")
        call.hang_up()
        poll(lambda: _cancellations(bed) == before + 1, timeout_s=5, describe="the mock counting the cancellation")
        check = _check_cancelled_trace(bed, call.trace_id, mode, "aggregated", decoded=False)
        prefill = check.one(Vllm.PREFILL, Service.VLLM)
        assert prefill.duration_ms < 2500, f"prefill ran on for nobody: {prefill.duration_ms:.0f} ms"

        # 2. during decode: tokens are flowing
        stream = Stream(bed, spans, chat_body(**LONG_STREAM), headers=SLOW_TOKENS)
        assert stream.first_data().status == 200
        outcome = stream.abandon()
        poll(lambda: _cancellations(bed) == before + 2, timeout_s=5, describe="the mock counting the cancellation")
        check = _check_cancelled_trace(bed, outcome.trace_id, mode, "aggregated", decoded=True)
        assert check.one(Vllm.DECODE).duration_ms < 3000, "decode stopped when the client left"
    finally:
        spans.close()
    poll(lambda: _running(bed) == 0, timeout_s=5, describe="no request left running on the backends")
    assert_kit_healthy(bed)
    assert bed.client().chat(chat_body()).status == 200


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_client_gone_mid_stream_is_cancelled_through_the_pd_sidecar(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(topology("direct", flow="pd", vllm=("vllm-0",)))
    spans = SpanSource(bed.otlp_endpoint, "direct", "pd")
    try:
        before = _cancellations(bed)
        stream = Stream(bed, spans, chat_body(**LONG_STREAM), headers=SLOW_TOKENS)
        assert stream.first_data().status == 200
        outcome = stream.abandon()
        poll(lambda: _cancellations(bed) == before + 1, timeout_s=5, describe="the decoder counting the cancellation")
    finally:
        spans.close()
    assert counter(bed.services["vllm-d0"].url, CANCELLED) == before + 1, "the decoder is the one cancelled"
    trace = bed.jaeger.wait_for_trace(outcome.trace_id, [Pd.REQUEST, Pd.DECODE,
                                                         Vllm.REQUEST], min_spans=10, quiet_s=1.0)
    check = TraceCheck(trace)
    decode_llm = check.one(Vllm.REQUEST, Service.VLLM, **{Vllm.INSTANCE: "vllm-d0"})
    assert decode_llm.error and decode_llm.attributes.get(Vllm.CANCELLED), decode_llm.attributes
    assert check.one(Pd.REQUEST).error and check.one(Pd.DECODE).error, "the sidecar's spans end, with the error"
    assert not check.one(Vllm.REQUEST, Service.VLLM, **{Vllm.INSTANCE: "vllm-p0"}).error, "prefill had finished: not cancelled"
    poll(lambda: _running(bed) == 0, timeout_s=5, describe="no request left running on the backends")
    assert_kit_healthy(bed)
