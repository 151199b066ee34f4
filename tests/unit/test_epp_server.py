"""The EPP's gRPC server in process, driven through the real ext_proc stub over loopback."""

import asyncio
import json

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from eppkit.services.epp import server
from eppkit.services.picker.core import Picker
from eppkit.services.picker.endpoints import parse_endpoints
from eppkit.services.picker.pool import Pool
from eppkit.services.picker.scorers.round_robin import RoundRobin
from eppkit.services.picker.scraper import MetricsScraper
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = pytest.mark.unit

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def request_messages(body: bytes):
    hm = base_pb2.HeaderMap()
    for k, v in {":path": "/v1/completions", ":method": "POST"}.items():
        hm.headers.append(base_pb2.HeaderValue(key=k, raw_value=v.encode()))
    yield pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=hm))
    yield pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))


def test_one_stream_over_grpc_carries_the_decision_and_the_trace_context():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    pool = Pool(parse_endpoints("vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002"))
    body = json.dumps({"model": "m", "prompt": "hi"}).encode()

    async def go():
        running = await server.start("127.0.0.1", 0, Picker(pool, RoundRobin()), [MetricsScraper(pool, interval_s=0)], tracer)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
                stub = pb_grpc.ExternalProcessorStub(channel)
                call = stub.Process(request_messages(body), metadata=(("traceparent", TRACEPARENT),))
                return [r async for r in call]
        finally:
            await running.stop(grace_s=0)

    responses = asyncio.run(go())
    assert [r.WhichOneof("response") for r in responses] == ["request_headers", "request_body"]
    mutation = responses[0].request_headers.response.header_mutation.set_headers
    assert {h.header.key: h.header.raw_value for h in mutation}["x-gateway-destination-endpoint"] == b"127.0.0.1:8001,127.0.0.1:8002"
    assert responses[1].request_body.response.body_mutation.streamed_response.body == body

    (process,) = [s for s in exporter.get_finished_spans() if s.name == "epp.process"]
    assert format(process.context.trace_id, "032x") == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert format(process.parent.span_id, "016x") == "00f067aa0ba902b7"
