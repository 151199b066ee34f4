"""Headers every mock backend (vLLM, encoder) sets on its answers: which pod served, under which request id.

Tests and pickers read ``x-inference-pod`` to prove the endpoint that served is the one picked,
and ``x-request-id`` is honoured and echoed as vLLM does.
"""

from __future__ import annotations

import uuid
from typing import Awaitable, Callable

from aiohttp import web

HEADER_POD = "x-inference-pod"
HEADER_REQUEST_ID = "x-request-id"
# The sha256 of the request body exactly as it arrived (mock answers only): what the conformance suite
# compares with what the client sent, to prove the body went through the EPP byte for byte.
HEADER_BODY_SHA256 = "x-mock-request-sha256"
# The sha256 of the (non-streamed) answer's body as the mock wrote it: what the plugin verdict compares with what
# the client received, to prove the answer came back byte for byte.
HEADER_RESPONSE_SHA256 = "x-mock-response-sha256"
# Test steering (mock only): with this header set to 1, a non-streamed answer carries the request body exactly as it
# arrived, base64 in the field RECEIVED_BODY_FIELD: what the conformance suite shows when a body arrived changed.
HEADER_ECHO_BODY = "x-mock-echo-body"
RECEIVED_BODY_FIELD = "x_mock_received_body"
REQUEST_ID_KEY = web.RequestKey("eppkit_request_id", str) if hasattr(web, "RequestKey") else "eppkit_request_id"
BODY_SHA256_KEY = web.RequestKey("eppkit_body_sha256", str) if hasattr(web, "RequestKey") else "eppkit_body_sha256"
RECEIVED_BODY_KEY = web.RequestKey("eppkit_received_body", bytes) if hasattr(web, "RequestKey") else "eppkit_received_body"


def response_headers(request: web.Request, instance: str) -> dict[str, str]:
    """The pod, the request id and (once the body is read) the body's digest."""
    out = {HEADER_POD: instance, HEADER_REQUEST_ID: request[REQUEST_ID_KEY]}
    if BODY_SHA256_KEY in request:
        out[HEADER_BODY_SHA256] = request[BODY_SHA256_KEY]
    return out


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
