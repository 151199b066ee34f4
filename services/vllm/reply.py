"""The mock's side of the connection: what one request holds while it runs (:class:`Flow`), the response's headers,
writes and end, an error said in a body already started, and the token writer that paces a stream."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from eppkit.services.openai_errors import OpenAIError, error_body
from eppkit.services.openai_server import api
from eppkit.services.openai_server.responses import DONE, Renderer
from eppkit.services.pod_headers import (
    HEADER_POD,
    HEADER_REQUEST_ID,
    HEADER_RESPONSE_SHA256,
    received_fields,
    response_headers,
)
from eppkit.services.vllm.disconnects import Watch
from eppkit.services.vllm.failures import Failure
from eppkit.services.vllm.lora import LoraUse
from opentelemetry import trace


class ClientGone(Exception):
    """The client closed the connection while we were writing to it."""


@dataclass
class Flow:
    """What one request holds while it runs (so cleanup knows what to give back)."""

    request_id: str
    span: trace.Span
    arrival: float  # time.monotonic()
    rng: random.Random
    response: web.StreamResponse | None = None
    slot: bool = False
    kv_blocks: int = 0
    first_token_at: float | None = None
    finish_reason: str | None = None
    injected: Failure | None = None
    watch: Watch | None = None
    lora: LoraUse | None = None  # its adapter's use, for a request on a LoRA adapter
    ended_ns: int | None = None  # wall clock when the last bytes were handed to the socket


def extra_fields(request: web.Request, kv_transfer_params: dict | None, metadata_report: dict | None) -> dict[str, Any]:
    """What the answer carries beside the choices: vLLM's ``kv_transfer_params`` (a prefill's for its decoder, else
    null), a multipart request's metadata report, and the body as it arrived when a test asks (to show a change)."""
    extra: dict[str, Any] = {"kv_transfer_params": kv_transfer_params}
    if metadata_report is not None:
        extra["multipart_metadata"] = metadata_report
    return {**extra, **received_fields(request)}


async def finish(flow: Flow, renderer: Renderer, req: api.GenRequest, out: list[str], use: dict[str, Any],
                 extra: dict[str, Any], instance: str) -> web.StreamResponse:
    """The answer's end: a stream's last chunk (its usage when asked) and ``[DONE]``; else the whole JSON body, written
    after the headers a multipart request sent at its first token, or as a response of its own."""
    if req.stream:
        tail = renderer.final_chunk(flow.finish_reason, extra, last=not req.include_usage)
        if req.include_usage:
            tail += renderer.usage_chunk(use)
        await write_eof(flow, tail + DONE)
        return flow.response
    body = json.dumps(renderer.full("".join(out), flow.finish_reason, use, extra)).encode()
    if flow.response is not None:
        await write_eof(flow, body)
        return flow.response
    return web.Response(body=body, content_type="application/json",
                        headers={**headers(instance, flow), HEADER_RESPONSE_SHA256: hashlib.sha256(body).hexdigest()})


class InjectedDrop(Exception):
    """Raised after an injected stall/disconnect closed the connection."""


def headers(instance: str, flow: Flow) -> dict[str, str]:
    """The pod and the request id, on every answer."""
    return {HEADER_POD: instance, HEADER_REQUEST_ID: flow.request_id}

async def prepare(request: web.Request, flow: Flow, sse: bool, instance: str) -> None:
    resp = web.StreamResponse(status=200, headers={**response_headers(request, instance),
                                                    **headers(instance, flow)})
    if request.version >= (1, 1):
        # explicit, so resp.chunked is true and TokenWriter frames its direct writes
        resp.enable_chunked_encoding()
    if sse:
        resp.content_type = "text/event-stream"
        resp.charset = "utf-8"  # as vLLM's (Starlette's) "text/event-stream; charset=utf-8"
        resp.headers["Cache-Control"] = "no-cache"
        # The first token follows at once: let aiohttp send the headers with it, one
        # send() instead of two (sends on loopback dominate the mock's CPU per request).
        resp._send_headers_immediately = False
    else:
        resp.content_type = "application/json"
    flow.response = resp
    try:
        await resp.prepare(request)
    except (ConnectionResetError, RuntimeError) as exc:
        raise ClientGone() from exc

async def write(flow: Flow, data: bytes) -> None:
    try:
        await flow.response.write(data)
    except ConnectionResetError as exc:  # includes aiohttp's ClientConnectionResetError
        raise ClientGone() from exc

async def write_eof(flow: Flow, data: bytes = b"") -> None:
    # The request is over once these bytes leave: stamp it here, not in the cleanup
    # after it, which a descheduled process can reach after Envoy's own span has ended.
    flow.ended_ns = time.time_ns()
    try:
        await flow.response.write_eof(data)
    except ConnectionResetError as exc:
        raise ClientGone() from exc

async def inband_error(flow: Flow, exc: OpenAIError, extra: dict[str, Any]) -> None:
    """Headers already went out (multipart/streaming): say it in the body (``extra`` beside its ``error``), then
    end."""
    body = error_body(exc.status, exc.message, param=exc.param, code=exc.code, extra=extra)
    try:
        if flow.response.content_type == "text/event-stream":
            await flow.response.write(Renderer._sse(body) + DONE)
        else:
            await flow.response.write(json.dumps(body).encode())
        await flow.response.write_eof()
    except ConnectionResetError:
        pass


class TokenWriter:
    """Writes tokens ``1..stop-1`` of a stream from TokenClock callbacks.

    The first token and the final chunks go through aiohttp's ``StreamResponse.write``;
    the tokens in between are framed here (HTTP/1.1 chunked, as aiohttp frames them) and
    handed straight to the transport. That skips a coroutine switch, a future and a timer
    per token, which is what lets one process keep hundreds of streams on time.
    """

    def __init__(self, clock, response: web.StreamResponse, transport, renderer, out, stop, next_gap, observe_lateness) -> None:
        self.clock = clock
        self.observe_lateness = observe_lateness
        self.transport = transport
        self.chunked = response.chunked
        self.renderer = renderer
        self.out = out
        self.stop = stop
        self.next_gap = next_gap
        self.index = 1
        self.deadline = 0.0
        self.done: asyncio.Future | None = None

    async def run(self, base: float) -> None:
        self.done = asyncio.get_running_loop().create_future()
        self.deadline = base + self.next_gap()
        self.clock.call_at(self.deadline, self._tick)
        await self.done  # a cancelled handler cancels this future; _tick then stops

    def _tick(self) -> None:
        done = self.done
        if done.done():
            return
        transport = self.transport
        if transport is None or transport.is_closing():
            done.set_exception(ClientGone())
            return
        self.observe_lateness(time.monotonic() - self.deadline)
        chunk = self.renderer.token_chunk(self.out[self.index], first=False)
        transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if self.chunked else chunk)
        self.index += 1
        if self.index >= self.stop:
            done.set_result(None)
            return
        self.deadline += self.next_gap()
        self.clock.call_at(self.deadline, self._tick)
