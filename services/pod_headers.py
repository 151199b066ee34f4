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
REQUEST_ID_KEY = web.RequestKey("eppkit_request_id", str) if hasattr(web, "RequestKey") else "eppkit_request_id"


def pod_headers_middleware(instance: str, on_response: Callable[[web.StreamResponse], None] | None = None):
    """Middleware: the request id (the client's, or a fresh one) in ``request[REQUEST_ID_KEY]``, and both
    headers on every answer not yet sent (a streamed answer set them itself before its first byte)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        rid = request.headers.get(HEADER_REQUEST_ID) or uuid.uuid4().hex
        request[REQUEST_ID_KEY] = rid
        resp = await handler(request)
        if not resp.prepared:
            resp.headers[HEADER_POD] = instance
            resp.headers[HEADER_REQUEST_ID] = rid
        if on_response is not None:
            on_response(resp)
        return resp

    return middleware
