"""One HTTP/2 request over cleartext (h2c, prior knowledge), with what HTTP/1.1 clients rarely send: a body
written in pieces with pauses, request trailers, a request cancelled half-way. Built on the ``h2`` library's
state machine; this module only moves its bytes over a socket and waits on flow control.

The traced client (:mod:`eppkit.observability.client`) uses it for ``protocol="h2c"``: Envoy then sees what a
gRPC-speaking or HTTP/2 gateway client sends, the body as DATA frames (the last one with END_STREAM, or the
trailers' HEADERS frame carrying it).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions


@dataclass
class H2Answer:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    trailers: dict[str, str] = field(default_factory=dict)
    reset: str | None = None  # the stream was reset (by the server: its error code), or the connection ended


class H2Error(OSError):
    """The connection failed, or the answer did not come within the timeout."""


def request(host: str, port: int, method: str, path: str, headers: dict[str, str], body: Iterable[bytes] = (), *,
            pause_s: float = 0.0, trailers: dict[str, str] | None = None, cancel_after: int | None = None,
            timeout_s: float = 30.0, on_data: Callable[[bytes], None] | None = None,
            answer: H2Answer | None = None, give_up: Callable[[], bool] | None = None) -> H2Answer:
    """Send one request and read its answer. ``body``: the pieces, each its own DATA frame(s), ``pause_s``
    between them; ``trailers``: sent after the body (they end the stream); ``cancel_after``: reset the stream
    (CANCEL) after that many pieces instead of finishing it. ``on_data`` gets each piece of the answer's body
    as it arrives; ``answer`` is filled in as the answer arrives (its headers are there by the first body bytes);
    ``give_up``: asked after each read of the answer, True resets the stream (CANCEL) there, mid-answer.
    """
    deadline = time.monotonic() + timeout_s
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    answer = answer if answer is not None else H2Answer()
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        conn.initiate_connection()
        pieces = [bytes(p) for p in body]
        stream = conn.get_next_available_stream_id()
        ends_with_headers = not pieces and not trailers and cancel_after is None
        conn.send_headers(stream, [(":method", method), (":path", path), (":scheme", "http"),
                                   (":authority", f"{host}:{port}"), *headers.items()], end_stream=ends_with_headers)
        sock.sendall(conn.data_to_send())
        done = False  # the answer is complete (or the stream was reset)

        def pump(block: bool) -> bool:
            """Read what the server sent (waiting for it when ``block``); True once the answer is complete."""
            sock.settimeout(max(0.01, deadline - time.monotonic()) if block else 0.0)
            try:
                data = sock.recv(65536)
            except (BlockingIOError, socket.timeout) as exc:
                if block:
                    raise H2Error(f"no answer within {timeout_s:g} s") from exc
                return False
            if not data:
                answer.reset = answer.reset or "the server closed the connection"
                return True
            finished = False
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                    answer.headers = {k: v for k, v in event.headers}
                    answer.status = int(answer.headers.get(":status", "0"))
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                    conn.acknowledge_received_data(event.flow_controlled_length, stream)
                    if on_data is not None and event.data:
                        on_data(event.data)
                elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == stream:
                    answer.trailers = {k: v for k, v in event.headers}
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    finished = True
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                    answer.reset = f"stream reset by the server ({event.error_code!r})"
                    finished = True
                elif isinstance(event, h2.events.ConnectionTerminated):
                    answer.reset = answer.reset or f"connection closed by the server ({event.error_code!r})"
                    finished = True
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
            return finished

        try:
            for i, piece in enumerate(pieces):
                if done:  # answered (an immediate response) or reset before the body was all sent
                    return answer
                if cancel_after is not None and i == cancel_after:
                    conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
                    sock.sendall(conn.data_to_send())
                    answer.reset = f"cancelled by the client after {i} of {len(pieces)} pieces"
                    return answer
                if i and pause_s:
                    time.sleep(pause_s)
                last = i == len(pieces) - 1 and not trailers and cancel_after is None
                view = memoryview(piece)
                while True:  # the piece as the flow-control windows allow, then its end
                    while conn.local_flow_control_window(stream) <= 0 and not done:
                        done = pump(block=True)
                    if done:  # answered (or reset) before the body was all sent
                        return answer
                    size = min(len(view), conn.local_flow_control_window(stream), conn.max_outbound_frame_size)
                    conn.send_data(stream, view[:size].tobytes(), end_stream=last and size == len(view))
                    sock.sendall(conn.data_to_send())
                    view = view[size:]
                    if not view:
                        break
                done = pump(block=False) or done
            if cancel_after is not None and cancel_after >= len(pieces) and not done:
                conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
                sock.sendall(conn.data_to_send())
                answer.reset = f"cancelled by the client after all {len(pieces)} pieces"
                return answer
            if trailers and not done:
                conn.send_headers(stream, list(trailers.items()), end_stream=True)
                sock.sendall(conn.data_to_send())
            while not done:
                done = pump(block=True)
                if not done and give_up is not None and give_up():
                    conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
                    sock.sendall(conn.data_to_send())
                    answer.reset = "cancelled by the client mid-answer"
                    return answer
        except (h2.exceptions.ProtocolError, OSError) as exc:
            if isinstance(exc, H2Error):
                raise
            raise H2Error(f"{type(exc).__name__}: {exc}") from exc
    return answer
