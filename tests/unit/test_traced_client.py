"""The traced client's clocks: its result and its root span tell the same story."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from eppkit.observability.client import TracedClient
from eppkit.observability.contract import Stream
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = pytest.mark.unit


class _SlowStream(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        time.sleep(0.05)
        for piece in ("a", "b"):
            self.wfile.write(b'data: {"choices": [{"delta": {"content": "%s"}}]}\n\n' % piece.encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _SlowStream)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_ttft_equals_the_first_token_event_offset_in_the_root_span(server):
    client = TracedClient(server, None)
    exporter = InMemorySpanExporter()
    client._provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = client.chat({"model": "m", "stream": True})
    client.close()

    (root,) = exporter.get_finished_spans()
    (event,) = [e for e in root.events if e.name == Stream.FIRST_TOKEN]
    assert result.tokens == ["a", "b"]
    assert result.ttft_ms >= 50
    # exact to the nanosecond's rounding, however long the client took between its steps
    assert (event.timestamp - root.start_time) / 1e6 == pytest.approx(result.ttft_ms, abs=1e-5)


class _PacedChat(BaseHTTPRequestHandler):
    """vLLM's chat stream over HTTP/1.1 chunked (as vLLM and Envoy send it): a role-only chunk, then a token
    every GAP_S, then a usage chunk and [DONE]."""

    GAP_S = 0.03
    protocol_version = "HTTP/1.1"

    def _event(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._event(b'data: {"choices": [{"delta": {"role": "assistant", "content": ""}}]}\n\n')
        for i, piece in enumerate(("a", " b", " c")):
            if i:
                time.sleep(self.GAP_S)
            self._event(b'data: {"choices": [{"delta": {"content": "%s"}}]}\n\n' % piece.encode())
        self._event(b'data: {"choices": [], "usage": {"completion_tokens": 3}}\n\ndata: [DONE]\n\n')
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


def test_token_gaps_are_the_content_chunks_arrivals_and_the_role_chunk_is_no_token():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _PacedChat)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        client = TracedClient(f"http://127.0.0.1:{srv.server_address[1]}", None)
        result = client.chat({"model": "m", "stream": True})
        client.close()
    finally:
        srv.shutdown()
        srv.server_close()
    assert result.tokens == ["a", " b", " c"] and len(result.token_times_s) == 3
    assert result.first_token_s == result.token_times_s[0], "TTFT is the first content chunk's arrival"
    # Two gaps, each between two content chunks' arrivals (the role chunk, sent right before the first token, would
    # add a third): judged on the client's own arrival times, not on the machine's timing (a busy machine stretches or
    # shortens a gap; the pacing only keeps the chunks apart).
    times = result.token_times_s
    assert result.itl_ms == pytest.approx([(times[1] - times[0]) * 1000, (times[2] - times[1]) * 1000]), result.itl_ms
    assert all(g > 0 for g in result.itl_ms), result.itl_ms
    assert result.tpot_ms == pytest.approx(sum(result.itl_ms) / 2)
