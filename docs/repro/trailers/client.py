"""One HTTP/2 (h2c) POST with an 87-byte JSON body and a request trailer. Usage: python client.py 10000"""
import socket
import sys

import h2.connection
import h2.events

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "trailers follow this body."}]}'

port = int(sys.argv[1])
conn = h2.connection.H2Connection()
with socket.create_connection(("127.0.0.1", port)) as sock:
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "POST"), (":path", "/"), (":scheme", "http"), (":authority", "repro"),
                          ("content-type", "application/json")])
    conn.send_data(1, BODY)
    conn.send_headers(1, [("x-trailer", "1")], end_stream=True)
    sock.sendall(conn.data_to_send())
    answer, done = b"", False
    while not done:
        for event in conn.receive_data(sock.recv(65536)):
            if isinstance(event, h2.events.DataReceived):
                answer += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, 1)
            done = done or isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset))
        sock.sendall(conn.data_to_send())
print(f"client: sent {len(BODY)} body bytes; the upstream says {answer.decode()}")
