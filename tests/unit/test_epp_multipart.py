"""The EPP's two-phase multipart flow (stream.py HOLDING): messages in, messages out, spans, wire form."""

import asyncio
import json

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from eppkit.observability import otel
from eppkit.services.epp.stream import Phase, StreamProcessor
from eppkit.services.picker.core import Picker
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.scorers.round_robin import RoundRobin
from eppkit.services.vllm.multipart import MultipartReader, boundary_of

from tests.support.epp_stream import TRACEPARENT, Spans, body_msg, feed, headers_msg

pytestmark = pytest.mark.unit


def chat_body(stream: bool) -> bytes:
    return json.dumps({"model": "mock-llm", "stream": stream, "max_tokens": 3,
                       "messages": [{"role": "user", "content": "two phases"}]}).encode()


def make(spans, trigger="first-token"):
    pool = Pool(parse_endpoints("vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002"))
    return StreamProcessor(Picker(pool, RoundRobin()), spans.tracer, otel.extract({"traceparent": TRACEPARENT}),
                           multipart=True, multipart_trigger=trigger)


def response_headers(status="200", end_of_stream=False):
    hm = base_pb2.HeaderMap()
    for k, v in {":status": status, "x-inference-pod": "vllm-0", "content-type": "text/event-stream"}.items():
        hm.headers.append(base_pb2.HeaderValue(key=k, raw_value=v.encode()))
    return pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=hm, end_of_stream=end_of_stream))


def response_body(data: bytes, end_of_stream=False):
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=data, end_of_stream=end_of_stream))


def mutation(resp: pb.ProcessingResponse):
    m = resp.request_headers.response.header_mutation
    return {h.header.key: h.header.raw_value.decode() for h in m.set_headers}, list(m.remove_headers)


def streamed(resp: pb.ProcessingResponse):
    s = resp.request_body.response.body_mutation.streamed_response
    return s.body, s.end_of_stream


def kinds(responses):
    return [r.WhichOneof("response") for r in responses]


def read_parts(content_type: str, wire: bytes):
    """Parse what went upstream with the mock vLLM's own reader."""
    class Source:
        def __init__(self, data):
            self.chunks = [data]

        async def readany(self):
            return self.chunks.pop(0) if self.chunks else b""

    reader = MultipartReader(Source(wire), boundary_of(content_type))
    return asyncio.run(reader.read_until_closed())


def test_end_of_body_sends_part1_with_the_request_held_open():
    spans = Spans()
    stream = make(spans)
    body = chat_body(stream=True)
    out = feed(stream, headers_msg(path="/v1/chat/completions"), body_msg(body[:10], False), body_msg(body[10:], True))
    assert out[1] == []  # still buffering
    headers_resp, part1 = out[2]
    set_headers, removed = mutation(headers_resp)
    assert set_headers["x-gateway-destination-endpoint"] == "127.0.0.1:8001,127.0.0.1:8002"
    assert set_headers["content-type"] == f"multipart/mixed; boundary={stream.boundary}"
    assert "content-length" not in set_headers and "content-length" in removed
    assert headers_resp.request_headers.response.clear_route_cache
    data, eos = streamed(part1)
    assert not eos, "part 1 must leave the request open"
    assert data.startswith(f"--{stream.boundary}\r\n".encode()) and data.endswith(body)
    assert stream.phase is Phase.HOLDING
    assert spans.names() == ["epp.pick"]  # epp.process stays open, epp.inject comes later


def test_streamed_request_injects_part2_on_the_first_token_and_the_mock_reads_both_parts():
    spans = Spans()
    stream = make(spans)
    body = chat_body(stream=True)
    out = feed(stream, headers_msg(path="/v1/chat/completions"), body_msg(body, True),
               response_headers(), response_body(b"data: {first token}\n\n"), response_body(b"data: [DONE]\n\n", True))
    part1 = streamed(out[1][1])[0]
    # the headers pass at once; part 2 waits for the first token
    assert kinds(out[2]) == ["response_headers"]
    # first token: part 2 + closing boundary end the request, then the token goes on unchanged
    assert kinds(out[3]) == ["request_body", "response_body"]
    part2, eos = streamed(out[3][0])
    assert eos
    assert out[3][1].response_body.response.body_mutation.streamed_response.body == b"data: {first token}\n\n"
    assert stream.phase is Phase.FORWARDED
    assert kinds(out[4]) == ["response_body"]  # later chunks just pass

    content_type = mutation(out[1][0])[0]["content-type"]
    parts = read_parts(content_type, part1 + part2)
    assert [p.name for p in parts] == ["request_payload", "metadata"]
    assert parts[0].body == body
    assert json.loads(parts[1].body) == stream.metadata

    process, inject = spans.by_name("epp.process"), spans.by_name("epp.inject")
    assert [e.name for e in process.events] == ["part1_sent", "response_headers_seen", "first_token_seen", "part2_sent"]
    assert inject.parent.span_id == process.context.span_id
    assert json.loads(inject.attributes["epp.multipart.metadata"]) == stream.metadata
    assert stream.metadata["served_by"] == "vllm-0" and stream.metadata["response_status"] == 200
    assert stream.metadata["endpoint"] == "127.0.0.1:8001" and len(stream.metadata["nonce"]) == 32
    assert process.end_time >= inject.end_time


@pytest.mark.parametrize("stream_flag, trigger, status", [
    # (client asked to stream, EPP trigger, upstream status): all inject on the response headers
    (False, "first-token", "200"),  # not streamed: no body until decode, which waits for part 2
    (True, "headers", "200"),       # told to act on the headers
    (True, "first-token", "503"),   # an error answer: end the request at once
])
def test_injects_on_the_response_headers_when_no_token_will_come_first(stream_flag, trigger, status):
    spans = Spans()
    stream = make(spans, trigger)
    out = feed(stream, headers_msg(path="/v1/chat/completions"), body_msg(chat_body(stream_flag), True),
               response_headers(status))
    assert kinds(out[2]) == ["request_body", "response_headers"]
    assert streamed(out[2][0])[1]
    assert stream.phase is Phase.FORWARDED
    events = [e.name for e in spans.by_name("epp.process").events]
    assert events == ["part1_sent", "response_headers_seen", "part2_sent"]
    assert spans.by_name("epp.inject").attributes["epp.multipart.trigger"] == trigger


def test_request_trailers_end_the_request_after_part2():
    spans = Spans()
    stream = make(spans)
    out = feed(stream, headers_msg(path="/v1/chat/completions"), body_msg(chat_body(False), False),
               pb.ProcessingRequest(request_trailers=pb.HttpTrailers()), response_headers())
    assert kinds(out[2]) == ["request_headers", "request_body"]
    assert not streamed(out[2][1])[1]
    assert kinds(out[3]) == ["request_body", "request_trailers", "response_headers"]
    assert not streamed(out[3][0])[1]  # the trailers end it


def test_stream_closed_while_holding_ends_the_span_as_error():
    spans = Spans()
    stream = make(spans)
    feed(stream, headers_msg(path="/v1/chat/completions"), body_msg(chat_body(True), True))
    stream.close("client went away")
    process = spans.by_name("epp.process")
    assert not process.status.is_ok and "part 2 never sent" in process.status.description
    assert [e.name for e in process.events] == ["part1_sent", "stream_closed_while_holding"]


def test_requests_without_a_body_are_not_split():
    spans = Spans()
    stream = make(spans)
    (out,) = feed(stream, headers_msg(path="/v1/models", method="GET", end_of_stream=True))
    assert kinds(out) == ["request_headers"]
    assert "content-type" not in mutation(out[0])[0]
    assert stream.phase is Phase.FORWARDED


def test_unknown_trigger_is_refused():
    with pytest.raises(ValueError, match="trigger"):
        make(Spans(), trigger="whenever")
