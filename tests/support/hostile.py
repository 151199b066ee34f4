"""Raw HTTP/1.1 for the hostile-client tests: bytes no well-behaved client library would send.

:func:`exchange` writes a request as given (optionally in pieces, with pauses, or stopping part-way),
then reads one response: status, headers and a body of ``Content-Length`` bytes (or up to the close).
It gives up after ``read_timeout_s`` with ``status == 0``, so "no answer at all" is a result the
test can assert on, not a hang.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field

CHAT_PATH = "/v1/chat/completions"
GOOD_BODY = json.dumps({"model": "mock-llm", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).encode()


@dataclass
class Answer:
    status: int  # 0: nothing came back before the socket closed or the read timed out
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    elapsed_s: float = 0.0
    note: str = ""  # "closed" / "timeout" / "reset" when the answer is incomplete

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def describe(self) -> str:
        return f"HTTP {self.status} after {self.elapsed_s:.2f} s {self.note} {self.headers.get('content-type', '')!r} {self.body[:300]!r}"


def head(method: str = "POST", path: str = CHAT_PATH, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def exchange(port: int, pieces: list[bytes] | bytes, *, pause_s: float = 0.0, read_timeout_s: float = 10.0) -> Answer:
    """Send ``pieces`` (``pause_s`` between them), then read one response."""
    if isinstance(pieces, bytes):
        pieces = [pieces]
    sock = socket.create_connection(("127.0.0.1", port), timeout=read_timeout_s)
    started = time.monotonic()
    try:
        for i, piece in enumerate(pieces):
            if i and pause_s:
                time.sleep(pause_s)
            try:
                sock.sendall(piece)
            except OSError:  # Envoy answered and closed while we were still writing
                break
        return _read_response(sock, started, read_timeout_s)
    finally:
        sock.close()


def _read_response(sock: socket.socket, started: float, timeout_s: float) -> Answer:
    data = b""
    deadline = started + timeout_s
    note = ""
    while True:
        if b"\r\n\r\n" in data:
            header_blob, _, rest = data.partition(b"\r\n\r\n")
            status_line, *lines = header_blob.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", ""):
                body = _dechunk(rest)
                if body is not None:
                    return Answer(int(status_line.split()[1]), headers, body, time.monotonic() - started)
            else:
                length = int(headers.get("content-length", "-1"))
                if 0 <= length <= len(rest):
                    return Answer(int(status_line.split()[1]), headers, rest[:length], time.monotonic() - started)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            note = "timeout"
            break
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            note = "timeout"
            break
        except ConnectionResetError:
            note = "reset"
            break
        if not chunk:
            note = "closed"
            break
        data += chunk
    elapsed = time.monotonic() - started
    if b"\r\n\r\n" in data:
        header_blob, _, rest = data.partition(b"\r\n\r\n")
        status_line, *lines = header_blob.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
        return Answer(int(status_line.split()[1]), headers, rest, elapsed, note)
    return Answer(0, {}, data, elapsed, note)


def _dechunk(data: bytes) -> bytes | None:
    """A chunked body decoded, or None while its last chunk has not arrived."""
    body = b""
    while True:
        line, sep, data = data.partition(b"\r\n")
        if not sep:
            return None
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return body
        if len(data) < size + 2:
            return None
        body, data = body + data[:size], data[size + 2:]


# -- the hostile requests --------------------------------------------------------------------------------

def malformed_chunk_size() -> list[bytes]:
    """A chunked body whose second chunk-size line is not hex."""
    return [head(headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
            + b"5\r\n{\"mod\r\nZZZ\r\nel\": 1}\r\n0\r\n\r\n"]


def huge_header(size: int = 70 * 1024) -> list[bytes]:
    return [head(headers={"Content-Type": "application/json", "Content-Length": str(len(GOOD_BODY)),
                          "X-Padding": "a" * size}) + GOOD_BODY]


def length_and_chunked() -> list[bytes]:
    return [head(headers={"Content-Type": "application/json", "Content-Length": "4", "Transfer-Encoding": "chunked"})
            + b"4\r\n{}{}\r\n0\r\n\r\n"]


def unknown_transfer_coding() -> list[bytes]:
    return [head(headers={"Content-Type": "application/json", "Transfer-Encoding": "gzip, chunked"})
            + b"2\r\n{}\r\n0\r\n\r\n"]


def garbage_request_line() -> list[bytes]:
    return [b"\x16\x03\x01 hello there\r\n\r\n"]


def bad_header_name() -> list[bytes]:
    return [head(headers={"Content-Type": "application/json", "Content-Length": "2", "Bad Header(": "x"}) + b"{}"]


# The cases Envoy's HTTP/1 codec refuses before any filter runs: (id, pieces, status).
CODEC_CASES = [
    ("malformed-chunk-size", malformed_chunk_size, 400),
    ("70kb-header", huge_header, 431),
    ("content-length-and-chunked", length_and_chunked, 400),
    ("unknown-transfer-coding", unknown_transfer_coding, 501),
    ("garbage-request-line", garbage_request_line, 400),
    ("bad-header-name", bad_header_name, 400),
]


def body_stops_half_way() -> list[bytes]:
    """A chunked body: one chunk, then the client goes quiet (the socket stays open)."""
    return [head(headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"}) + b"8\r\n{\"model\"\r\n"]


def short_body() -> list[bytes]:
    """``Content-Length: 100`` and 10 bytes of body."""
    return [head(headers={"Content-Type": "application/json", "Content-Length": "100"}) + b'{"model": '[:10]]


def unfinished_headers() -> list[bytes]:
    return [f"POST {CHAT_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl".encode()]


class Stalled(threading.Thread):
    """A slow client in the background: ``pieces`` sent, then nothing; the answer kept in ``answer``."""

    def __init__(self, port: int, pieces: list[bytes], read_timeout_s: float):
        super().__init__(daemon=True, name="stalled-client")
        self.port, self.pieces, self.read_timeout_s = port, pieces, read_timeout_s
        self.answer: Answer | None = None

    def run(self) -> None:
        self.answer = exchange(self.port, self.pieces, read_timeout_s=self.read_timeout_s)
