"""One ext_proc stream through the EPP's state machine: messages in, messages out, spans."""

import json

import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from eppkit.observability import otel
from eppkit.services.epp.stream import Phase, StreamProcessor
from eppkit.services.picker.core import Picker
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.scorers.round_robin import RoundRobin

from tests.support.epp_stream import TRACE_ID, TRACEPARENT, Spans, body_msg, feed, headers_msg

pytestmark = pytest.mark.unit

BODY = json.dumps({"model": "mock-llm", "prompt": "hello", "max_tokens": 2}).encode()


def make_stream(spans, picker=None, endpoints="vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002", **kwargs):
    pool = Pool(parse_endpoints(endpoints))
    picker = picker or Picker(pool, RoundRobin())
    return StreamProcessor(picker, spans.tracer, otel.extract({"traceparent": TRACEPARENT}), **kwargs)


def fed(*messages, **stream_options):
    """A new stream (:func:`make_stream` with ``stream_options``) fed ``messages``: its spans, the stream and its
    replies, one list a message."""
    spans = Spans()
    stream = make_stream(spans, **stream_options)
    return spans, stream, feed(stream, *messages)


def set_headers(resp: pb.ProcessingResponse) -> dict:
    common = resp.request_headers.response
    return {h.header.key: h.header.raw_value.decode() for h in common.header_mutation.set_headers}


def test_body_is_buffered_then_decision_and_body_go_out_together():
    spans = Spans()
    stream = make_stream(spans)
    half = len(BODY) // 2
    out = feed(stream, headers_msg(), body_msg(BODY[:half], False), body_msg(BODY[half:], True))
    assert out[0] == [] and out[1] == []  # nothing is answered while the body is buffering
    headers_resp, body_resp = out[2]
    assert headers_resp.WhichOneof("response") == "request_headers"
    # The header and the metadata carry the same value (the EPP protocol): primary, then fallbacks.
    assert set_headers(headers_resp) == {
        "x-gateway-destination-endpoint": "127.0.0.1:8001,127.0.0.1:8002",
        "content-length": str(len(BODY)),
    }
    assert headers_resp.request_headers.response.clear_route_cache
    md = headers_resp.dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert md["x-gateway-destination-endpoint"].string_value == "127.0.0.1:8001,127.0.0.1:8002"
    streamed = body_resp.request_body.response.body_mutation.streamed_response
    assert streamed.body == BODY and streamed.end_of_stream
    assert stream.phase is Phase.FORWARDED


def test_spans_process_pick_inject_under_envoys_context_and_closed_before_answer():
    spans, _, _ = fed(headers_msg(), body_msg(BODY, True))
    process, pick, inject = spans.by_name("epp.process"), spans.by_name("epp.pick"), spans.by_name("epp.inject")
    assert format(process.context.trace_id, "032x") == TRACE_ID
    assert format(process.parent.span_id, "016x") == "b7ad6b7169203331"
    assert pick.parent.span_id == process.context.span_id == inject.parent.span_id
    assert pick.end_time <= inject.start_time <= inject.end_time <= process.end_time
    assert pick.attributes["epp.endpoint"] == "127.0.0.1:8001"
    assert pick.attributes["epp.endpoint.name"] == "vllm-0"
    assert pick.attributes["epp.scorer"] == "round-robin"
    assert pick.attributes["epp.reason"].startswith("round-robin")
    assert pick.attributes["gen_ai.request.model"] == "mock-llm"
    assert process.attributes["epp.endpoint"] == "127.0.0.1:8001"


def test_a_buffered_body_is_answered_with_the_decision_and_goes_on_unchanged():
    # BUFFERED: Envoy waits for the headers' answer before it sends the body, whole, in one message (trailers or not).
    spans = Spans()
    stream = make_stream(spans, request_body="buffered")
    headers_out, body_out, trailers_out = feed(stream, headers_msg(), body_msg(BODY, False),
                                               pb.ProcessingRequest(request_trailers=pb.HttpTrailers()))
    assert [r.WhichOneof("response") for r in headers_out] == ["request_headers"]
    assert not headers_out[0].request_headers.response.header_mutation.set_headers  # no decision yet
    (decision,) = body_out
    assert decision.WhichOneof("response") == "request_body"
    common = decision.request_body.response
    assert {h.header.key: h.header.raw_value.decode() for h in common.header_mutation.set_headers} == {
        "x-gateway-destination-endpoint": "127.0.0.1:8001,127.0.0.1:8002"}
    assert common.clear_route_cache and not common.HasField("body_mutation")
    md = decision.dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert md["x-gateway-destination-endpoint"].string_value == "127.0.0.1:8001,127.0.0.1:8002"
    assert [r.WhichOneof("response") for r in trailers_out] == ["request_trailers"]
    assert spans.by_name("epp.pick").attributes["gen_ai.request.model"] == "mock-llm"


def test_with_no_body_sent_the_headers_are_answered_with_the_decision():
    _, stream, (out, trailers_out) = fed(headers_msg(), pb.ProcessingRequest(request_trailers=pb.HttpTrailers()),
                                         request_body="none")
    assert set_headers(out[0]) == {"x-gateway-destination-endpoint": "127.0.0.1:8001,127.0.0.1:8002"}
    assert len(out) == 1 and stream.phase is Phase.FORWARDED
    assert [r.WhichOneof("response") for r in trailers_out] == ["request_trailers"]


def test_an_unknown_body_path_or_multipart_without_streaming_is_refused():
    with pytest.raises(ValueError, match="choose one of streamed, buffered, none"):
        make_stream(Spans(), request_body="chunked")
    with pytest.raises(ValueError, match="multipart flow needs the request body streamed"):
        make_stream(Spans(), request_body="buffered", multipart=True)


def test_request_without_body_is_decided_on_headers():
    _, stream, (out,) = fed(headers_msg(path="/v1/models", method="GET", end_of_stream=True))
    assert len(out) == 1
    assert set_headers(out[0]) == {"x-gateway-destination-endpoint": "127.0.0.1:8001,127.0.0.1:8002"}
    assert stream.phase is Phase.FORWARDED


def test_trailers_end_the_body_and_one_reply_carries_the_decision_and_the_whole_body():
    # Streamed back, the body would reach the backend twice on a route with retries (Envoy 1.36-1.40,
    # envoyproxy/envoy#45470): CONTINUE_AND_REPLACE carries it once, and no trailers reply follows.
    _, _, out = fed(
        headers_msg(),
        body_msg(BODY, False),
        pb.ProcessingRequest(request_trailers=pb.HttpTrailers()),
    )
    assert out[0] == [] and out[1] == []
    (reply,) = out[2]
    common = reply.request_headers.response
    assert common.status == pb.CommonResponse.CONTINUE_AND_REPLACE
    assert common.body_mutation.body == BODY
    assert set_headers(reply)["x-gateway-destination-endpoint"].startswith("127.0.0.1:")
    assert common.clear_route_cache


def test_forced_endpoint_by_name_wins_with_the_rest_as_fallbacks():
    spans, _, out = fed(headers_msg(extra={"x-eppkit-force-endpoint": "c, nope, 127.0.0.1:1"}), body_msg(BODY, True),
                        endpoints="a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3")
    headers_resp = out[1][0]
    assert set_headers(headers_resp)["x-gateway-destination-endpoint"] == "127.0.0.1:3,127.0.0.1:1"
    md = headers_resp.dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert md["x-gateway-destination-endpoint"].string_value == "127.0.0.1:3,127.0.0.1:1"
    assert spans.by_name("epp.pick").attributes["epp.scorer"] == "forced"


def test_gaie_test_header_forces_the_pick_by_ip_or_ip_and_port():
    stream = make_stream(Spans(), endpoints="a=127.0.0.2:1,b=127.0.0.3:1,c=127.0.0.3:2")
    out = feed(stream, headers_msg(extra={"test-epp-endpoint-selection": "127.0.0.3:2,127.0.0.2"}), body_msg(BODY, True))
    md = out[1][0].dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert md["x-gateway-destination-endpoint"].string_value == "127.0.0.3:2,127.0.0.2:1"
    stream = make_stream(Spans(), endpoints="a=127.0.0.2:1,b=127.0.0.3:1,c=127.0.0.3:2")
    out = feed(stream, headers_msg(extra={"test-epp-endpoint-selection": "127.0.0.3"}), body_msg(BODY, True))
    md = out[1][0].dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert md["x-gateway-destination-endpoint"].string_value == "127.0.0.3:1,127.0.0.3:2"  # an IP: every endpoint on it


@pytest.mark.parametrize(
    "endpoints, extra_headers, body, status, code",
    [
        # (pool, request headers, body, expected status, expected error code)
        ("", {}, BODY, 503, "no_endpoint"),  # empty pool
        ("a=127.0.0.1:1", {"x-eppkit-force-endpoint": "zzz"}, BODY, 503, "no_endpoint"),  # forced outside the pool
        ("a=127.0.0.1:1", {}, b"{not json", 400, "invalid_json"),
        ("a=127.0.0.1:1", {}, b"[1, 2]", 400, "invalid_json"),
        ("a=127.0.0.1:1@other", {}, BODY, 404, "model_not_found"),
    ],
)
def test_no_decision_becomes_an_openai_style_immediate_response(endpoints, extra_headers, body, status, code):
    spans, stream, out = fed(headers_msg(extra=extra_headers), body_msg(body, True), endpoints=endpoints)
    (resp,) = out[1]
    imm = resp.immediate_response
    assert imm.status.code == status
    error = json.loads(imm.body)["error"]
    assert error["code"] == code and error["message"]
    assert {h.header.key: h.header.raw_value for h in imm.headers.set_headers}["content-type"] == b"application/json"
    assert stream.phase is Phase.CLOSED
    process = spans.by_name("epp.process")
    assert not process.status.is_ok
    assert process.attributes["http.response.status_code"] == status


def test_a_crashing_picker_still_answers_envoy():
    class Broken:
        scorer_name = "broken"

        async def pick(self, request):
            raise RuntimeError("boom")

        async def start(self):
            pass

        async def close(self):
            pass

    _, _, out = fed(headers_msg(), body_msg(BODY, True), picker=Broken())
    assert out[1][0].immediate_response.status.code == 500


def test_stream_closed_before_end_of_body_ends_the_span_as_error():
    spans, stream, _ = fed(headers_msg(), body_msg(BODY[:5], False))
    stream.close("client went away")
    process = spans.by_name("epp.process")
    assert not process.status.is_ok
    assert "client went away" in process.attributes["epp.reason"]
    assert spans.names() == ["epp.process"]


def test_response_path_messages_are_passed_through_unchanged():
    _, _, out = fed(
        headers_msg(),
        body_msg(BODY, True),
        pb.ProcessingRequest(response_headers=pb.HttpHeaders()),
        pb.ProcessingRequest(response_body=pb.HttpBody(body=b"data: x\n\n", end_of_stream=True)),
    )
    assert out[2][0].WhichOneof("response") == "response_headers"
    streamed = out[3][0].response_body.response.body_mutation.streamed_response
    assert streamed.body == b"data: x\n\n" and streamed.end_of_stream


def test_out_of_order_messages_are_ignored():
    spans = Spans()
    stream = make_stream(spans)
    assert feed(stream, body_msg(BODY, True)) == [[]]
    assert stream.phase is Phase.AWAIT_HEADERS
