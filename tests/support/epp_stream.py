"""Driving the EPP's ext_proc stream state machine in unit tests: messages in, messages out, spans."""

import asyncio

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"


class Spans:
    """A private tracer whose finished spans can be looked up by name."""

    def __init__(self):
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = provider.get_tracer("test")

    def by_name(self, name):
        found = [s for s in self.exporter.get_finished_spans() if s.name == name]
        assert found, f"no span named {name!r}; have {[s.name for s in self.exporter.get_finished_spans()]}"
        return found[0]

    def names(self):
        return sorted(s.name for s in self.exporter.get_finished_spans())


def headers_msg(path="/v1/completions", method="POST", end_of_stream=False, extra=None):
    hm = base_pb2.HeaderMap()
    for k, v in {":path": path, ":method": method, "content-type": "application/json", **(extra or {})}.items():
        hm.headers.append(base_pb2.HeaderValue(key=k, raw_value=v.encode()))
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=hm, end_of_stream=end_of_stream))


def body_msg(data: bytes, end_of_stream: bool):
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=data, end_of_stream=end_of_stream))



def feed(stream, *messages):
    async def go():
        out = []
        for m in messages:
            out.append(await stream.handle(m))
        return out

    return asyncio.run(go())
