"""The mock's side of a request coming in: its body (JSON, or multipart's payload part and later its metadata
part), its Content-Type, and the ``x-mock-*`` headers that steer its latency."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web
from eppkit.observability.contract import Vllm
from eppkit.services.openai_errors import OpenAIError
from eppkit.services.openai_server.api import ms_header
from eppkit.services.pod_headers import note_received
from eppkit.services.vllm import multipart
from eppkit.services.vllm.latency import Overrides
from eppkit.services.vllm.reply import ClientGone
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

HEADER_TTFT = "x-mock-ttft-ms"
HEADER_ITL = "x-mock-itl-ms"
HEADER_KV_TRANSFER = "x-mock-kv-transfer-ms"
HEADER_METADATA_TIMEOUT = "x-mock-metadata-timeout-ms"


async def await_metadata(request: web.Request, reader: multipart.MultipartReader, span: trace.Span,
                         default_timeout_ms: float) -> dict[str, Any]:
    """The metadata part and the closing boundary, within the timeout (a header may set it); ``span``, started,
    is ended here."""
    timeout_ms = ms_header(request.headers, HEADER_METADATA_TIMEOUT)
    if timeout_ms is None:
        timeout_ms = default_timeout_ms
    span.set_attribute(Vllm.MULTIPART_TIMEOUT_MS, timeout_ms)
    started = time.monotonic()
    try:
        try:
            parts = await asyncio.wait_for(reader.read_until_closed(), timeout_ms / 1000.0)
        except asyncio.TimeoutError:
            raise OpenAIError(
                408,
                f"multipart: the '{multipart.METADATA_PART}' part and the closing boundary did not arrive "
                f"within {timeout_ms:g} ms after the first token",
                code="metadata_timeout",
            ) from None
        except multipart.MultipartError as exc:
            if transport_gone(request):
                raise ClientGone() from None
            raise OpenAIError(400, f"multipart: {exc}", code="metadata_missing") from None
        except (ConnectionResetError, web.HTTPException):
            raise ClientGone() from None
        meta = [p for p in parts if p.name == multipart.METADATA_PART]
        if not meta:
            names = ", ".join(p.name for p in parts) or "none"
            raise OpenAIError(
                400,
                f"multipart: the body closed without a '{multipart.METADATA_PART}' part (parts after the payload: {names})",
                code="metadata_missing",
            )
        waited = time.monotonic() - started
        body = meta[0].body
        try:
            value: Any = json.loads(body) if body else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            value = body.decode("utf-8", "replace")
        report = {
            "received": True,
            "content": value,
            "bytes": len(body),
            "waited_ms": round(waited * 1000.0, 3),
            "parts": [p.name for p in parts],
        }
        span.set_attribute(Vllm.MULTIPART_METADATA_BYTES, len(body))
        span.set_attribute(Vllm.MULTIPART_METADATA, body[:1024].decode("utf-8", "replace"))
        return report
    except OpenAIError as exc:
        span.set_status(Status(StatusCode.ERROR, exc.message))
        raise
    finally:
        span.end()

async def read_payload_part(request: web.Request, max_bytes: int) -> tuple[multipart.MultipartReader, bytes]:
    try:
        boundary = multipart.boundary_of(request.headers.get("Content-Type", ""))
        reader = multipart.MultipartReader(request.content, boundary, max_bytes=max_bytes)
        part = await reader.next_part()
    except multipart.MultipartError as exc:
        status = 413 if isinstance(exc, multipart.MultipartTooLarge) else 400
        raise OpenAIError(status, f"multipart: {exc}") from None
    if part is None:
        raise OpenAIError(400, "multipart: the body closed before any part")
    if part.name != multipart.PAYLOAD_PART:
        raise OpenAIError(400, f"multipart: the first part must be '{multipart.PAYLOAD_PART}', got '{part.name}'")
    return reader, part.body

async def read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise OpenAIError(413, f"request body of {request.content_length} bytes exceeds the limit of {limit} bytes")
    chunks, total = [], 0
    while True:
        chunk = await request.content.readany()
        if not chunk:
            break
        total += len(chunk)
        if total > limit:
            raise OpenAIError(413, f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    note_received(request, body)
    return body


def check_content_type(request: web.Request) -> None:
    """JSON or multipart only, as vLLM (``validate_json_request``); no Content-Type at all is let through.

    Without this a body sent as text/plain or a form was parsed as JSON anyway and served.
    """
    if "Content-Type" not in request.headers:
        return
    media = request.content_type.lower()
    if media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
        return
    if media.startswith("multipart/"):
        return
    raise OpenAIError(415, f"Unsupported Media Type: Only 'application/json' is allowed, got {media!r}",
                      param="Content-Type", code="unsupported_media_type")


def transport_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def overrides(headers) -> Overrides:
    return Overrides(
        ttft_ms=ms_header(headers, HEADER_TTFT),
        itl_ms=ms_header(headers, HEADER_ITL),
        kv_transfer_ms=ms_header(headers, HEADER_KV_TRANSFER),
    )
