"""An HTTP/1.1 upstream that says how many body bytes it received and whether they are one JSON document.
Usage: python upstream.py 8001"""
import asyncio
import json
import sys


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    body = b""
    if "transfer-encoding: chunked" in head:
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        while await reader.readuntil(b"\r\n") != b"\r\n":  # the trailers, if any
            pass
    elif "content-length:" in head:
        body = await reader.readexactly(int(head.split("content-length:")[1].split("\r\n")[0]))
    try:
        json.loads(body)
        verdict = "one JSON document"
    except ValueError as exc:
        verdict = f"not one JSON document: {exc}"
    print(f"upstream: received {len(body)} body bytes, {verdict}", flush=True)
    answer = json.dumps({"received": len(body), "body": verdict}).encode()
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                 b"content-length: %d\r\n\r\n%s" % (len(answer), answer))
    await writer.drain()
    writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
