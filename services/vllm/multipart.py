"""Incremental ``multipart/mixed`` reading for the two-phase (multipart) flow.

The EPP sends part 1 (``request_payload``, the OpenAI JSON) and keeps the request body
open; the backend must start prefill as soon as that part is complete, answer with
headers and the first token, and only later read part 2 (``metadata``) and the closing
boundary. So this parser works on ``request.content`` chunk by chunk and hands back each
part the moment its end is known:

- when the part has a ``Content-Length`` header, after that many body bytes;
- otherwise when the delimiter that follows it (``CRLF--boundary``) has arrived.

A part's name comes from ``Content-Disposition: ...; name="..."``, else from
``Content-ID`` (angle brackets stripped), else from its position (first part
``request_payload``, second ``metadata``). :func:`encode_part` and :func:`closing` build
the wire form for senders and tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from eppkit.services.openai_server.flags import non_negative_int

PAYLOAD_PART = "request_payload"
METADATA_PART = "metadata"
_POSITIONAL_NAMES = (PAYLOAD_PART, METADATA_PART)

_BOUNDARY_RE = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_NAME_RE = re.compile(r'\bname="?([^";]+)"?', re.IGNORECASE)
_MAX_HEADER_BYTES = 16 * 1024


class MultipartError(ValueError):
    """The body is not the multipart/mixed the flow expects; the message says why."""


class MultipartTooLarge(MultipartError):
    """The body, or a part by its declared Content-Length, is over the reader's limit (a 413, not a 400)."""


class ChunkSource(Protocol):
    async def readany(self) -> bytes: ...


@dataclass
class Part:
    name: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def boundary_of(content_type: str) -> str:
    match = _BOUNDARY_RE.search(content_type or "")
    if not match:
        raise MultipartError("multipart/mixed request without a boundary parameter in Content-Type")
    return match.group(1).strip()


def encode_part(boundary: str, name: str, body: bytes, *, content_type: str = "application/json", first: bool = False) -> bytes:
    """One part, delimiter first, with Content-Length so a reader knows its end at once."""
    lead = b"" if first else b"\r\n"
    head = (
        f"--{boundary}\r\n"
        f'Content-Disposition: form-data; name="{name}"\r\n'
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return lead + head + body


def closing(boundary: str) -> bytes:
    return f"\r\n--{boundary}--\r\n".encode()


class MultipartReader:
    """Reads parts from an aiohttp ``StreamReader`` (anything with ``readany()``)."""

    def __init__(self, source: ChunkSource, boundary: str, *, max_bytes: int = 8 * 1024 * 1024) -> None:
        self._source = source
        self._dash = b"--" + boundary.encode()
        self._delimiter = b"\r\n" + self._dash
        self._buf = bytearray()
        self._max_bytes = max_bytes
        self._total = 0
        self._eof = False
        self._state = "preamble"  # preamble | delimiter_due | after_delimiter | closed
        self._count = 0
        self.closed = False

    async def _fill(self) -> bool:
        if self._eof:
            return False
        chunk = await self._source.readany()
        if not chunk:
            self._eof = True
            return False
        self._total += len(chunk)
        if self._total > self._max_bytes:
            raise MultipartTooLarge(f"multipart body larger than {self._max_bytes} bytes")
        self._buf += chunk
        return True

    async def _need(self, n: int, what: str) -> None:
        while len(self._buf) < n:
            if not await self._fill():
                raise MultipartError(f"request body ended {what}")

    async def next_part(self) -> Part | None:
        """The next complete part, or None once the closing boundary has been read."""
        if self._state == "closed":
            return None
        if self._state == "preamble":
            await self._skip_preamble()
        elif self._state == "delimiter_due":
            await self._consume_due_delimiter()
        # just after a dash-boundary: "--" closes, CRLF (after optional padding) opens a part
        await self._need(2, "right after a boundary")
        if self._buf[:2] == b"--":
            del self._buf[:2]
            self._state = "closed"
            self.closed = True
            return None
        while True:
            idx = self._buf.find(b"\r\n")
            if idx >= 0:
                if self._buf[:idx].strip(b" \t"):
                    raise MultipartError("unexpected bytes after a boundary")
                del self._buf[: idx + 2]
                break
            if len(self._buf) > 64:
                raise MultipartError("unexpected bytes after a boundary")
            if not await self._fill():
                raise MultipartError("request body ended right after a boundary")
        headers = await self._read_headers()
        body, self._state = await self._read_body(headers)
        self._count += 1
        return Part(name=_part_name(headers, self._count), headers=headers, body=body)

    async def read_until_closed(self) -> list[Part]:
        """Every remaining part, up to and including the closing boundary."""
        parts = []
        while True:
            part = await self.next_part()
            if part is None:
                return parts
            parts.append(part)

    async def _skip_preamble(self) -> None:
        while True:
            if self._buf.startswith(self._dash):
                del self._buf[: len(self._dash)]
                return
            idx = self._buf.find(self._delimiter)
            if idx >= 0:
                del self._buf[: idx + len(self._delimiter)]
                return
            if not await self._fill():
                raise MultipartError("no multipart boundary found in the request body")

    async def _read_headers(self) -> dict[str, str]:
        if self._buf.startswith(b"\r\n"):  # a part without headers
            del self._buf[:2]
            return {}
        while True:
            idx = self._buf.find(b"\r\n\r\n")
            if idx >= 0:
                raw = bytes(self._buf[:idx]).decode("latin-1")
                del self._buf[: idx + 4]
                break
            if len(self._buf) > _MAX_HEADER_BYTES:
                raise MultipartError("multipart part headers too large")
            if not await self._fill():
                raise MultipartError("request body ended inside a part's headers")
        headers: dict[str, str] = {}
        for line in raw.split("\r\n"):
            if not line.strip():
                continue
            key, sep, value = line.partition(":")
            if not sep:
                raise MultipartError(f"malformed part header line {line!r}")
            headers[key.strip().lower()] = value.strip()
        return headers

    async def _read_body(self, headers: dict[str, str]) -> tuple[bytes, str]:
        """The part's body and the reader's next state."""
        length = headers.get("content-length")
        if length is not None:
            try:
                n = non_negative_int(length, "part Content-Length")
            except ValueError as exc:
                raise MultipartError(str(exc)) from None
            if n > self._max_bytes:
                raise MultipartTooLarge(f"a part of {n} bytes (its Content-Length) exceeds the limit of {self._max_bytes} bytes")
            await self._need(n, "inside a part (shorter than its Content-Length)")
            body = bytes(self._buf[:n])
            del self._buf[:n]
            # The delimiter follows; the next call consumes it, so this part is handed
            # back without waiting for bytes the sender may not have written yet.
            return body, "delimiter_due"
        while True:
            idx = self._buf.find(self._delimiter)
            if idx >= 0:
                body = bytes(self._buf[:idx])
                del self._buf[: idx + len(self._delimiter)]
                return body, "after_delimiter"
            if not await self._fill():
                raise MultipartError("request body ended inside a part (no delimiter after it)")

    async def _consume_due_delimiter(self) -> None:
        await self._need(len(self._delimiter), "before the delimiter that must follow a part")
        if not self._buf.startswith(self._delimiter):
            raise MultipartError("a part's body is longer than its Content-Length (no delimiter after it)")
        del self._buf[: len(self._delimiter)]


def _part_name(headers: dict[str, str], position: int) -> str:
    disposition = headers.get("content-disposition")
    if disposition:
        match = _NAME_RE.search(disposition)
        if match:
            return match.group(1).strip()
    cid = headers.get("content-id")
    if cid:
        return cid.strip().strip("<>")
    if position <= len(_POSITIONAL_NAMES):
        return _POSITIONAL_NAMES[position - 1]
    return f"part{position}"
