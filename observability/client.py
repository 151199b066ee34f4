"""The traced client: every request it sends is the root span (`client.request`) of its trace.

It owns a private tracer provider (not the global one), so one process can drive several
testbeds and each exports to its own Jaeger.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import requests
import requests.adapters
from eppkit.observability import h2c
from eppkit.observability.contract import Client, Eppkit, Http, ResourceAttributes, Service, Stream
from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode


HTTP1, H2C = "http/1.1", "h2c"
PROTOCOLS = (HTTP1, H2C)  # what the client speaks to the gateway
VERSION = {HTTP1: "1.1", H2C: "2"}  # network.protocol.version


@dataclass
class ClientResult:
    trace_id: str
    status: int
    headers: dict[str, str]
    body: Any = None  # parsed JSON for non-streaming (or error) responses
    tokens: list[str] = field(default_factory=list)  # content deltas, in arrival order
    token_times_s: list[float] = field(default_factory=list)  # monotonic arrival time of each content delta
    events: list[dict] = field(default_factory=list)  # every SSE data object
    started_s: float = 0.0
    first_token_s: float | None = None  # monotonic time the first content delta arrived
    finished_s: float = 0.0
    error: str | None = None
    trailers: dict[str, str] = field(default_factory=dict)  # the answer's trailers (h2c)
    body_sha256: str | None = None  # of a non-streamed answer's body as it arrived (None: streamed, or no answer)
    request_bytes: int | None = None  # the request body's length as the client wrote it (None: no body)

    @property
    def text(self) -> str:
        if self.tokens:
            return "".join(self.tokens)
        if isinstance(self.body, dict):
            choices = self.body.get("choices") or [{}]
            msg = choices[0].get("message") or {}
            return msg.get("content") or choices[0].get("text") or ""
        return ""

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first_token_s is None else (self.first_token_s - self.started_s) * 1000

    @property
    def e2e_ms(self) -> float:
        return (self.finished_s - self.started_s) * 1000

    @property
    def itl_ms(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive content chunks' arrivals (a chunk is a token,
        as the kit's mock and vLLM stream them), as load tools such as inference-perf measure them."""
        times = self.token_times_s
        return [(b - a) * 1000 for a, b in zip(times, times[1:])]

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first: (last token's arrival - first's) / (tokens - 1)."""
        times = self.token_times_s
        return (times[-1] - times[0]) * 1000 / (len(times) - 1) if len(times) > 1 else None


class TracedClient:
    def __init__(self, base_url: str, otlp_endpoint: str | None, *, mode: str = "", flow: str = "",
                 pool_size: int = 10):
        self.base_url = base_url.rstrip("/")
        self.mode, self.flow = mode, flow
        self._provider = TracerProvider(resource=Resource.create({ResourceAttributes.SERVICE_NAME: Service.CLIENT}))
        if otlp_endpoint:
            endpoint = otlp_endpoint if "://" in otlp_endpoint else f"http://{otlp_endpoint}"
            self._provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True), schedule_delay_millis=100)
            )
        self._tracer = self._provider.get_tracer("eppkit.client")
        self.trace_ids: list[str] = []  # of every request sent, oldest first (a failed test's traces)
        self._session = requests.Session()
        if pool_size > 10:  # requests keeps 10 keep-alive connections per host by default
            self._session.mount("http://", requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=pool_size))

    def close(self) -> None:
        self._provider.force_flush(5000)
        self._provider.shutdown()
        self._session.close()

    def flush(self) -> None:
        self._provider.force_flush(5000)

    def chat(self, body: dict | None, *, path: str = "/v1/chat/completions", headers: dict | None = None,
             timeout_s: float = 120.0, raw_body: bytes | None = None,
             content_type: str = "application/json", method: str = "POST", protocol: str = HTTP1,
             pieces: int = 1, pause_s: float = 0.0, trailers: dict[str, str] | None = None,
             cancel_after: int | None = None, cancel_after_tokens: int | None = None) -> ClientResult:
        """POST ``body`` (or ``raw_body`` verbatim, for bad-input tests) and read the whole answer; with
        ``method="GET"`` (``GET /v1/models``) no body is sent.

        ``protocol``: ``http/1.1`` (default) or ``h2c`` (HTTP/2 over cleartext, :mod:`eppkit.observability.h2c`).
        ``pieces``: the body written in that many pieces, ``pause_s`` apart (HTTP/1.1: chunked transfer encoding),
        so it reaches the gateway as it does from a client that writes slowly. ``trailers`` (h2c): request
        trailers after the body. ``cancel_after`` (h2c): the client gives up after that many pieces.
        ``cancel_after_tokens``: the client gives up on a streamed answer once that many tokens came (HTTP/1.1: it
        closes the connection; h2c: it resets the stream), its ``error`` saying so."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol {protocol!r}: one of {', '.join(PROTOCOLS)}")
        if (trailers or cancel_after is not None) and protocol != H2C:
            raise ValueError("request trailers and a cancelled body need protocol='h2c' (Envoy drops HTTP/1.1 trailers)")
        attributes = {Eppkit.MODE: self.mode, Eppkit.FLOW: self.flow, Http.REQUEST_METHOD: method,
                      Http.URL_PATH: path, Http.PROTOCOL_VERSION: VERSION[protocol]}
        # One instant, read on both clocks: the span's wall-clock times and the result's monotonic
        # ones then tell the same story (a report's TTFT equals the first_token event's offset).
        started_ns, started_s = time.time_ns(), time.monotonic()
        with self._tracer.start_as_current_span(Client.REQUEST, kind=SpanKind.CLIENT, attributes=attributes,
                                                start_time=started_ns) as span:
            trace_id = format(span.get_span_context().trace_id, "032x")
            self.trace_ids.append(trace_id)
            out_headers = {"content-type": content_type, **(headers or {})} if method != "GET" else dict(headers or {})
            propagate.inject(out_headers)
            result = ClientResult(trace_id=trace_id, status=0, headers={}, started_s=started_s)
            data = None if method == "GET" else raw_body if raw_body is not None else json.dumps(body).encode()
            result.request_bytes = None if data is None else len(data)
            sse = _Sse(result, span, started_ns)
            try:
                if protocol == H2C:
                    self._send_h2c(method, path, data, out_headers, result, sse, timeout_s=timeout_s, pieces=pieces,
                                   pause_s=pause_s, trailers=trailers, cancel_after=cancel_after,
                                   cancel_after_tokens=cancel_after_tokens)
                else:
                    self._send_http1(method, path, data, out_headers, result, sse, span, timeout_s=timeout_s,
                                     pieces=pieces, pause_s=pause_s, cancel_after_tokens=cancel_after_tokens)
            except (requests.RequestException, h2c.H2Error, OSError) as exc:  # OSError: h2c cannot connect
                result.error = f"{type(exc).__name__}: {exc}"
                span.set_status(Status(StatusCode.ERROR, result.error))
            if result.status:
                span.set_attribute(Http.RESPONSE_STATUS_CODE, result.status)
            result.finished_s = time.monotonic()
            if result.status >= 500 or result.error:
                span.set_status(Status(StatusCode.ERROR, result.error or f"HTTP {result.status}"))
            span.set_attribute(Eppkit.TOKENS_RECEIVED, len(result.tokens))
        return result

    def _send_http1(self, method: str, path: str, data: bytes | None, headers: dict, result: ClientResult,
                    sse: "_Sse", span, *, timeout_s: float, pieces: int, pause_s: float,
                    cancel_after_tokens: int | None = None) -> None:
        if data is not None and pieces > 1:  # a generator body: requests sends it chunked, a piece at a time
            data = _paced(_split(data, pieces), pause_s)
        with self._session.request(method, self.base_url + path, data=data, headers=headers, stream=True,
                                   timeout=timeout_s) as resp:
            result.status = resp.status_code
            result.headers = {k.lower(): v for k, v in resp.headers.items()}
            if "text/event-stream" in resp.headers.get("content-type", ""):
                for line in resp.iter_lines(chunk_size=None):
                    if sse.line(line):
                        break
                    if cancel_after_tokens is not None and len(result.tokens) >= cancel_after_tokens:
                        result.error = f"cancelled by the client after {len(result.tokens)} tokens"
                        break  # leaving the block closes the connection mid-answer
            else:
                _set_body(result, resp.content)

    def _send_h2c(self, method: str, path: str, data: bytes | None, headers: dict, result: ClientResult, sse: "_Sse",
                  *, timeout_s: float, pieces: int, pause_s: float, trailers: dict | None,
                  cancel_after: int | None, cancel_after_tokens: int | None = None) -> None:
        host, _, port = self.base_url.removeprefix("http://").partition(":")
        answer, raw = h2c.H2Answer(), bytearray()

        def streaming() -> bool:
            return "text/event-stream" in answer.headers.get("content-type", "")

        def on_data(chunk: bytes) -> None:  # the answer's headers are in by its first body bytes
            if streaming():
                sse.feed(chunk)
            else:
                raw.extend(chunk)

        h2c.request(host, int(port or 80), method, path, {k.lower(): v for k, v in headers.items()},
                    _split(data, pieces) if data else (), pause_s=pause_s, trailers=trailers,
                    cancel_after=cancel_after, timeout_s=timeout_s, on_data=on_data, answer=answer,
                    give_up=None if cancel_after_tokens is None else
                    lambda: len(result.tokens) >= cancel_after_tokens)
        result.status = answer.status
        result.headers = {k: v for k, v in answer.headers.items() if not k.startswith(":")}
        result.trailers = dict(answer.trailers)
        if answer.reset:
            result.error = answer.reset
        if streaming():
            sse.finish()
        else:
            _set_body(result, bytes(raw))


def _split(data: bytes, pieces: int) -> list[bytes]:
    """``data`` in ``pieces`` parts of about equal size (fewer for a shorter body; none for an empty one)."""
    if not data:
        return []
    size = max(1, -(-len(data) // max(1, pieces)))
    return [data[i:i + size] for i in range(0, len(data), size)]


def _paced(parts: list[bytes], pause_s: float):
    for i, part in enumerate(parts):
        if i and pause_s:
            time.sleep(pause_s)
        yield part


def _set_body(result: ClientResult, raw: bytes) -> None:
    result.body_sha256 = hashlib.sha256(raw).hexdigest()
    try:
        result.body = json.loads(raw) if raw else None
    except ValueError:
        result.body = raw.decode(errors="replace")


class _Sse:
    """A streamed answer's server-sent events into a result, as they arrive: its events, its tokens and their times,
    the ``first_token`` event on the client's span."""

    def __init__(self, result: ClientResult, span, started_ns: int):
        self.result, self.span, self.started_ns = result, span, started_ns
        self._buffer = b""
        self._done = False

    def feed(self, data: bytes) -> None:
        """Bytes of the stream (any split): each whole line is read."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self.line(line.rstrip(b"\r"))

    def finish(self) -> None:
        if self._buffer:
            self.line(self._buffer.rstrip(b"\r"))
            self._buffer = b""

    def line(self, line: bytes) -> bool:
        """One line of the stream; True once ``data: [DONE]`` came (the rest is not read)."""
        result = self.result
        if self._done or not line or not line.startswith(b"data:"):
            return self._done
        payload = line[5:].strip()
        if payload == b"[DONE]":
            result.events.append({"done": True})
            self._done = True
            return True
        try:
            event = json.loads(payload)
        except ValueError:
            result.error = f"bad SSE payload: {payload[:200]!r}"
            return False
        result.events.append(event)
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            piece = delta.get("content") if "delta" in choice else choice.get("text")
            if piece:
                now = time.monotonic()
                if result.first_token_s is None:
                    result.first_token_s = now
                    offset_ns = round((now - result.started_s) * 1e9)
                    self.span.add_event(Stream.FIRST_TOKEN, timestamp=self.started_ns + offset_ns)
                result.tokens.append(piece)
                result.token_times_s.append(now)
        return False
