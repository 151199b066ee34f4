"""Helpers for tests and benchmarks of the mocks: spans in memory, servers in process.

- :class:`SpanRecorder` collects finished spans in memory and finds them by name, with
  an error naming what was there when a lookup fails.
- :func:`in_process` runs an aiohttp app on a free 127.0.0.1 port inside the current
  event loop and yields a ``TestClient``.

A service as a real subprocess is the testbed's :class:`eppkit.components.process.ServiceProcess` (this module
stays importable in the services image, which holds no testbed).
"""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class SpanRecorder:
    """A tracer whose finished spans stay in memory."""

    __test__ = False

    def __init__(self, service_name: str = "vllm") -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer(service_name)

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def names(self) -> list[str]:
        return [s.name for s in self.spans]

    def by_name(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.by_name(name)
        if len(found) != 1:
            raise AssertionError(f"expected exactly one span {name!r}, found {len(found)}; spans: {self.names()}")
        return found[0]

    def clear(self) -> None:
        self.exporter.clear()


@contextlib.asynccontextmanager
async def in_process(app: web.Application) -> AsyncIterator[TestClient]:
    server = TestServer(app, host="127.0.0.1")
    async with TestClient(server) as client:
        yield client


def make_mock(**config):
    """A MockVllm with its spans in memory: ``(mock, recorder)``. Keyword args are VllmConfig fields."""
    from eppkit.services.vllm.config import VllmConfig
    from eppkit.services.vllm.server import MockVllm

    recorder = SpanRecorder("vllm")
    return MockVllm(VllmConfig(**config).validate(), recorder.tracer), recorder


def sse_events(text: str) -> list:
    """The JSON payloads of an SSE body, with the string "[DONE]" where it appears."""
    import json

    out = []
    for block in text.split("\n\n"):
        block = block.strip()
        if not block.startswith("data: "):
            continue
        data = block[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def chat_body(text: str = "hello there", **extra) -> dict:
    return {"model": "mock-llm", "messages": [{"role": "user", "content": text}], **extra}
