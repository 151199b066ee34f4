"""Headers every mock backend (vLLM, encoder) sets on its answers: which pod served, under which request id, and
(once the mock has read the request's body) what it received.

Tests and pickers read ``x-inference-pod`` to prove the endpoint that served is the one picked,
and ``x-request-id`` is honoured and echoed as vLLM does.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from typing import Awaitable, Callable

from aiohttp import web

HEADER_POD = "x-inference-pod"
HEADER_REQUEST_ID = "x-request-id"
# The sha256 and the length of the request body exactly as it arrived (mock answers only, errors included): what the
# conformance suite compares with what the client sent, to prove the body went through the EPP byte for byte, and
# how many of its bytes arrived when it did not.
HEADER_BODY_SHA256 = "x-mock-request-sha256"
HEADER_BODY_BYTES = "x-mock-request-bytes"
# The sha256 of the (non-streamed) answer's body as the mock wrote it: what the plugin verdict compares with what
# the client received, to prove the answer came back byte for byte.
HEADER_RESPONSE_SHA256 = "x-mock-response-sha256"
# Test steering (mock only): with this header set to 1, every answer to a body the mock read (a JSON answer, a
# stream's last chunk, an OpenAI-style error beside its "error") carries the body exactly as it arrived, base64 in
# the top-level field RECEIVED_BODY_FIELD: what the conformance suite shows when a body arrived changed.
HEADER_ECHO_BODY = "x-mock-echo-body"
RECEIVED_BODY_FIELD = "x_mock_received_body"
REQUEST_ID_KEY = web.RequestKey("eppkit_request_id", str) if hasattr(web, "RequestKey") else "eppkit_request_id"
RECEIVED_BODY_KEY = web.RequestKey("eppkit_received_body", bytes) if hasattr(web, "RequestKey") else "eppkit_received_body"
# What the mock received: {HEADER_BODY_SHA256: ..., HEADER_BODY_BYTES: ...}, once it has read the whole body.
RECEIVED_KEY = web.RequestKey("eppkit_received", dict) if hasattr(web, "RequestKey") else "eppkit_received"


def note_received(request: web.Request, body: bytes) -> None:
    """Keep what the mock received of ``request``'s body for every answer to it: its digest and length, and (asked
    with HEADER_ECHO_BODY) the bytes themselves."""
    request[RECEIVED_KEY] = {HEADER_BODY_SHA256: hashlib.sha256(body).hexdigest(), HEADER_BODY_BYTES: str(len(body))}
    if request.headers.get(HEADER_ECHO_BODY) == "1":
        request[RECEIVED_BODY_KEY] = body


def received_fields(request: web.Request) -> dict[str, str]:
    """The body as it arrived, for an answer's top-level fields, when a test asked for it (else nothing)."""
    if RECEIVED_BODY_KEY not in request:
        return {}
    return {RECEIVED_BODY_FIELD: base64.b64encode(request[RECEIVED_BODY_KEY]).decode()}


def response_headers(request: web.Request, instance: str) -> dict[str, str]:
    """The pod, the request id and (once the body is read) the body's digest and length."""
    return {HEADER_POD: instance, HEADER_REQUEST_ID: request[REQUEST_ID_KEY], **request.get(RECEIVED_KEY, {})}


def pod_headers_middleware(instance: str, on_response: Callable[[web.StreamResponse], None] | None = None):
    """Middleware: the request id (the client's, or a fresh one) in ``request[REQUEST_ID_KEY]``, and both
    headers on every answer not yet sent (a streamed answer set them itself before its first byte)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        rid = request.headers.get(HEADER_REQUEST_ID) or uuid.uuid4().hex
        request[REQUEST_ID_KEY] = rid
        resp = await handler(request)
        if not resp.prepared:
            resp.headers.update(response_headers(request, instance))
        if on_response is not None:
            on_response(resp)
        return resp

    return middleware
