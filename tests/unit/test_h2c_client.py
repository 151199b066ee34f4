"""The traced client's HTTP/2 (eppkit.observability.h2c) against a small h2 server in a thread.

| the client sends | the server sees / the client gets |
|---|---|
| a GET (headers with END_STREAM) | the request, and the client the whole answer |
| a body in paced pieces | every byte, in as many DATA frames as pieces or more; END_STREAM on the last |
| a 300 KB body (past the 64 KiB flow-control window) | every byte: the client waits for the server's window updates |
| a body and trailers | the body, then the trailers, which end the stream |
| a body cancelled after 2 of 4 pieces | a RST_STREAM (CANCEL) after 2 pieces; the client's answer says it cancelled |
| a server that resets the stream | the client's answer names the reset |
"""

from __future__ import annotations

import json
import socket
import threading

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest

from eppkit.observability import h2c

pytestmark = pytest.mark.unit


class Server:
    """Serves one connection at a time: answers each stream with what it saw (JSON), or resets it (path /reset)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.seen: list[dict] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn_sock, _ = self.sock.accept()
            except OSError:
                return
            with conn_sock:
                self._one(conn_sock)

    def _one(self, sock):
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        streams: dict[int, dict] = {}
        while True:
            data = sock.recv(65536)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    streams[event.stream_id] = {"headers": dict(event.headers), "body": 0, "frames": 0,
                                                "trailers": {}, "reset": None}
                    if dict(event.headers)[":path"] == "/reset":
                        conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                        streams[event.stream_id]["reset"] = "by the server"
                elif isinstance(event, h2.events.DataReceived):
                    seen = streams[event.stream_id]
                    seen["body"] += len(event.data)
                    seen["frames"] += 1
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.TrailersReceived):
                    streams[event.stream_id]["trailers"] = dict(event.headers)
                elif isinstance(event, h2.events.StreamReset):
                    streams[event.stream_id]["reset"] = event.error_code
                    self.seen.append(streams[event.stream_id])
                elif isinstance(event, h2.events.StreamEnded) and not streams[event.stream_id]["reset"]:
                    seen = streams[event.stream_id]
                    self.seen.append(seen)
                    answer = json.dumps({k: v for k, v in seen.items() if k != "headers"}).encode()
                    conn.send_headers(event.stream_id, [(":status", "200"), ("content-type", "application/json")])
                    conn.send_data(event.stream_id, answer, end_stream=True)
            sock.sendall(conn.data_to_send())


@pytest.fixture
def server():
    s = Server()
    yield s
    s.sock.close()


def ask(server, method="POST", path="/", body=(), **kwargs):
    got = bytearray()
    answer = h2c.request("127.0.0.1", server.port, method, path, {"x-test": "1"}, body, timeout_s=5,
                         on_data=got.extend, **kwargs)
    return answer, (json.loads(got) if got else None)


def test_a_get_ends_with_its_headers_and_gets_the_whole_answer(server):
    answer, seen = ask(server, "GET")
    assert answer.status == 200 and answer.reset is None
    assert seen == {"body": 0, "frames": 0, "trailers": {}, "reset": None}


def test_a_body_in_paced_pieces_arrives_whole_in_as_many_frames(server):
    answer, seen = ask(server, body=[b"a" * 100] * 5, pause_s=0.01)
    assert answer.status == 200 and seen["body"] == 500 and seen["frames"] >= 5


def test_a_body_past_the_flow_control_window_waits_for_window_updates(server):
    answer, seen = ask(server, body=[b"b" * 300_000])
    assert answer.status == 200 and seen["body"] == 300_000


def test_trailers_follow_the_body_and_end_the_stream(server):
    answer, seen = ask(server, body=[b"c" * 87], trailers={"x-checksum": "abc"})
    assert seen["body"] == 87 and seen["trailers"] == {"x-checksum": "abc"}


def test_a_cancelled_body_is_a_reset_after_the_pieces_sent(server):
    answer, seen = ask(server, body=[b"d" * 10] * 4, pause_s=0.01, cancel_after=2)
    assert "cancelled by the client after 2 of 4 pieces" in answer.reset
    deadline = threading.Event()
    for _ in range(50):  # the server reads the reset after the client returned
        if server.seen:
            break
        deadline.wait(0.02)
    assert server.seen[-1]["body"] == 20 and server.seen[-1]["reset"] == h2.errors.ErrorCodes.CANCEL


def test_a_stream_the_server_resets_is_named(server):
    answer, _ = ask(server, "GET", path="/reset")
    assert answer.reset and "REFUSED_STREAM" in answer.reset
