"""Helpers for tests and benchmarks of the mocks: spans in memory, servers in process or
as subprocesses on free loopback ports.

- :class:`SpanRecorder` collects finished spans in memory and finds them by name, with
  an error naming what was there when a lookup fails.
- :func:`in_process` runs an aiohttp app on a free 127.0.0.1 port inside the current
  event loop and yields a ``TestClient``.
- :class:`MockProcess` is ``python -m eppkit.services.<name>`` as an object used in a ``with``:
  ``start()`` returns self once ``/health`` answers, ``stop()`` sends SIGINT, waits, then
  kills; a start that fails raises with the tail of the process's log and a hint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import AsyncIterator, Sequence

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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MockProcess:
    """One kit service as a subprocess on 127.0.0.1, for a ``with`` block."""

    __test__ = False

    def __init__(self, module: str = "eppkit.services.vllm", args: Sequence[str] = (), *, port: int | None = None, startup_timeout: float = 15.0) -> None:
        self.module = module
        self.args = list(args)
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.NamedTemporaryFile(prefix=f"{module.rsplit('.', 1)[-1]}-", suffix=".log", delete=False)

    def with_args(self, *args: str) -> "MockProcess":
        self.args.extend(args)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "MockProcess":
        cmd = [sys.executable, "-m", self.module, "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self._story(f"exited with code {self.proc.returncode} before answering /health"))
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last_error = str(exc)
            time.sleep(0.05)
        raise TimeoutError(self._story(f"did not answer /health within {self.startup_timeout:g}s (last error: {last_error})"))

    def _story(self, what: str) -> str:
        return (
            f"{self.module} on port {self.port} {what}.\n"
            f"--- last lines of {self._log.name} ---\n{self.log_tail()}\n"
            f"Hint: run `python -m {self.module} --port {self.port} {' '.join(self.args)}` by hand to see the error."
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(Path(self._log.name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 5.0) -> None:
        # SIGINT first so the service flushes its spans; kill only if it does not exit.
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def __enter__(self) -> "MockProcess":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self._log.close()


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
