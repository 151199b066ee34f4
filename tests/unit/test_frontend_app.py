"""The frontend's HTTP API in process, and the EPP's sidecar picker talking to it."""

import asyncio
import json

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from eppkit.observability import otel
from eppkit.services.epp.sidecar import FrontendPicker
from eppkit.services.epp.stream import StreamProcessor
from eppkit.services.frontend.app import build_app
from eppkit.services.picker.decision import PickError
from eppkit.services.picker.request import parse_request
from eppkit.services.picker.settings import PickerSettings, create_picker
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = pytest.mark.unit

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
BODY = {"model": "mock-llm", "messages": [{"role": "user", "content": "Tell me a story about a fox."}]}


def tracer_and_exporter():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


KV = PickerSettings(scorer="kv-router-scorer")
POOL = "vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002"


def frontend(endpoints=POOL, settings=KV):
    tracer, exporter = tracer_and_exporter()
    return build_app(create_picker(settings, endpoints), tracer), exporter


async def call(app, path, *, data, headers):
    async with TestServer(app, host="127.0.0.1") as srv, ClientSession() as s:
        async with s.post(srv.make_url(path), data=data, headers=headers) as r:
            return r.status, await r.json()


def test_routing_query_answers_worker_endpoint_and_token_count_with_spans():
    app, exporter = frontend()
    status, answer = asyncio.run(
        call(app, "/v1/chat/completions", data=json.dumps(BODY),
             headers={"x-routing-request": "true", "traceparent": TRACEPARENT})
    )
    assert status == 200
    assert answer["worker_id"] in ("vllm-0", "vllm-1")
    assert answer["endpoint"] == {"vllm-0": "127.0.0.1:8001", "vllm-1": "127.0.0.1:8002"}[answer["worker_id"]]
    assert answer["token_count"] > 0 and answer["scorer"] == "kv-router-scorer"
    assert answer["fallbacks"] == [a for a in ("127.0.0.1:8001", "127.0.0.1:8002") if a != answer["endpoint"]]
    assert answer["total_blocks"] >= answer["overlap_blocks"] == 0
    spans = {s.name: s for s in exporter.get_finished_spans()}
    route, tok = spans["frontend.route"], spans["frontend.tokenize"]
    assert format(route.parent.span_id, "016x") == "b7ad6b7169203331"
    assert tok.parent.span_id == route.context.span_id
    assert route.attributes["frontend.worker_id"] == answer["worker_id"]
    assert tok.attributes["frontend.token_count"] == answer["token_count"]


@pytest.mark.parametrize(
    "endpoints, data, headers, status, code",
    [
        # (pool, body, headers, expected status, expected error code)
        ("a=127.0.0.1:1", json.dumps(BODY), {}, 400, "not_a_routing_request"),  # inference is not its job
        ("a=127.0.0.1:1", "{oops", {"x-routing-request": "true"}, 400, "invalid_json"),
        ("a=127.0.0.1:1", "[]", {"x-routing-request": "true"}, 400, "invalid_json"),
        ("", json.dumps(BODY), {"x-routing-request": "true"}, 503, "no_endpoint"),
    ],
)
def test_frontend_refusals_are_openai_errors(endpoints, data, headers, status, code):
    app, _ = frontend(endpoints)
    got_status, answer = asyncio.run(call(app, "/v1/chat/completions", data=data, headers=headers))
    assert got_status == status
    assert answer["error"]["code"] == code


def test_epp_sidecar_picker_relays_the_frontend_decision_in_one_trace():
    app, exporter = frontend()
    epp_tracer, epp_exporter = tracer_and_exporter()

    def headers_msg():
        hm = base_pb2.HeaderMap()
        for k, v in {":path": "/v1/chat/completions", ":method": "POST"}.items():
            hm.headers.append(base_pb2.HeaderValue(key=k, raw_value=v.encode()))
        return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=hm))

    async def go():
        async with TestServer(app, host="127.0.0.1") as srv:
            picker = FrontendPicker(create_picker(KV, POOL), str(srv.make_url("")))
            try:
                stream = StreamProcessor(picker, epp_tracer, otel.extract({"traceparent": TRACEPARENT}))
                await stream.handle(headers_msg())
                body = json.dumps(BODY).encode()
                return await stream.handle(pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True)))
            finally:
                await picker.close()

    out = asyncio.run(go())
    mutation = {h.header.key: h.header.raw_value.decode() for h in out[0].request_headers.response.header_mutation.set_headers}
    assert mutation["x-gateway-worker-id"] in ("vllm-0", "vllm-1")
    primary = mutation["x-gateway-destination-endpoint"].split(",")[0]
    assert primary == {"vllm-0": "127.0.0.1:8001", "vllm-1": "127.0.0.1:8002"}[mutation["x-gateway-worker-id"]]
    pick = next(s for s in epp_exporter.get_finished_spans() if s.name == "epp.pick")
    route = next(s for s in exporter.get_finished_spans() if s.name == "frontend.route")
    assert route.parent.span_id == pick.context.span_id  # traceparent crossed the HTTP hop
    assert route.context.trace_id == pick.context.trace_id
    assert pick.attributes["epp.worker_id"] == mutation["x-gateway-worker-id"]
    assert pick.attributes["epp.scorer"] == "frontend:kv-router-scorer"
    assert pick.attributes["frontend.token_count"] > 0


def test_sidecar_picker_without_a_frontend_is_a_503():
    async def go():
        picker = FrontendPicker(create_picker(KV, "a=127.0.0.1:1"), "http://127.0.0.1:9", timeout_s=1)  # nothing listens
        try:
            await picker.pick(parse_request({":path": "/v1/completions"}, b'{"prompt": "x"}'))
        finally:
            await picker.close()

    with pytest.raises(PickError) as err:
        asyncio.run(go())
    assert err.value.status == 503 and err.value.code == "frontend_unreachable"


def test_a_body_over_the_workers_limit_is_refused_at_once_with_413():
    from eppkit.services.frontend.app import MAX_BODY_BYTES

    app, exporter = frontend()
    big = json.dumps({**BODY, "messages": [{"role": "user", "content": "w " * (MAX_BODY_BYTES // 2 + 10)}]})
    status, answer = asyncio.run(call(app, "/v1/chat/completions", data=big, headers={"x-routing-request": "true"}))
    assert status == 413 and answer["error"]["type"] == "BadRequestError", answer
    assert [s.name for s in exporter.get_finished_spans()] == [], "refused before any tokenizing"
