"""Incremental multipart/mixed reading: each part is handed back as soon as its end is known."""

import asyncio
import json

import pytest
from eppkit.services.vllm import multipart as mp

pytestmark = pytest.mark.unit

B = "xyzBOUNDARY"


class Source:
    """Feeds chunks on demand; ``gate`` lets a test hold the rest of the body back."""

    __test__ = False

    def __init__(self, *chunks: bytes, chunk_size: int | None = None) -> None:
        data = list(chunks)
        if chunk_size:
            joined = b"".join(chunks)
            data = [joined[i : i + chunk_size] for i in range(0, len(joined), chunk_size)]
        self.queue: asyncio.Queue = asyncio.Queue()
        for c in data:
            self.queue.put_nowait(c)
        self.reads = 0

    def feed(self, data: bytes) -> None:
        self.queue.put_nowait(data)

    def eof(self) -> None:
        self.queue.put_nowait(b"")

    async def readany(self) -> bytes:
        self.reads += 1
        return await self.queue.get()


PAYLOAD = json.dumps({"model": "m", "messages": []}).encode()


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("chunk_size", [None, 1, 7])
def test_reads_both_parts_and_closing_boundary_in_any_chunking(chunk_size):
    body = mp.encode_part(B, "request_payload", PAYLOAD, first=True) + mp.encode_part(B, "metadata", b'{"k":1}') + mp.closing(B)

    async def go():
        src = Source(body, chunk_size=chunk_size)
        reader = mp.MultipartReader(src, B)
        first = await reader.next_part()
        rest = await reader.read_until_closed()
        return first, rest, reader.closed

    first, rest, closed = run(go())
    assert (first.name, first.body) == ("request_payload", PAYLOAD)
    assert [(p.name, p.body) for p in rest] == [("metadata", b'{"k":1}')]
    assert closed


def test_part_with_content_length_is_ready_before_anything_follows_it():
    async def go():
        src = Source(mp.encode_part(B, "request_payload", PAYLOAD, first=True))  # nothing after it yet
        reader = mp.MultipartReader(src, B)
        part = await asyncio.wait_for(reader.next_part(), 1)
        assert part.body == PAYLOAD
        # the rest arrives later
        nxt = asyncio.ensure_future(reader.next_part())
        await asyncio.sleep(0.01)
        assert not nxt.done()
        src.feed(mp.encode_part(B, "metadata", b"{}") + mp.closing(B))
        meta = await asyncio.wait_for(nxt, 1)
        assert meta.name == "metadata"
        assert await reader.next_part() is None

    run(go())


def test_part_without_content_length_ends_at_the_next_delimiter():
    body = (
        f"--{B}\r\nContent-Type: application/json\r\n\r\n".encode() + PAYLOAD + f"\r\n--{B}".encode()
    )

    async def go():
        reader = mp.MultipartReader(Source(body), B)
        part = await asyncio.wait_for(reader.next_part(), 1)  # delimiter seen: complete, no more bytes needed
        assert part.name == "request_payload"  # positional name
        assert part.body == PAYLOAD

    run(go())


def test_names_from_content_id_and_preamble_is_skipped():
    body = (
        b"this is a preamble\r\n"
        + f"--{B}\r\nContent-ID: <request_payload>\r\n\r\n".encode() + PAYLOAD
        + f"\r\n--{B}\r\nContent-ID: <metadata>\r\n\r\nM\r\n--{B}--".encode()
    )

    async def go():
        reader = mp.MultipartReader(Source(body, b""), B)
        return [p.name for p in [await reader.next_part()] + await reader.read_until_closed()]

    assert run(go()) == ["request_payload", "metadata"]


@pytest.mark.parametrize(
    "body, message",
    [
        (b"no boundary at all", "no multipart boundary"),
        (f"--{B}\r\nContent-Length: 50\r\n\r\nshort".encode(), "shorter than its Content-Length"),
        (f"--{B}\r\nContent-Length: 2\r\n\r\ntoo long\r\n--{B}--".encode(), "longer than its Content-Length"),
        (f"--{B}\r\nX: y\r\n\r\nbody never delimited".encode(), "no delimiter after it"),
        (f"--{B}\r\nbroken header line\r\n\r\nx\r\n--{B}--".encode(), "malformed part header"),
        (f"--{B}\r\nContent-Length: abc\r\n\r\nx\r\n--{B}--".encode(), "not a number"),
    ],
)
def test_malformed_bodies_raise_multipart_error(body, message):
    async def go():
        reader = mp.MultipartReader(Source(body, b""), B)
        await reader.read_until_closed()

    with pytest.raises(mp.MultipartError, match=message):
        run(go())


def test_body_limit():
    async def go():
        reader = mp.MultipartReader(Source(b"x" * 100, b""), B, max_bytes=50)
        await reader.next_part()

    with pytest.raises(mp.MultipartError, match="larger than 50 bytes"):
        run(go())


@pytest.mark.parametrize(
    "content_type, boundary",
    [
        ('multipart/mixed; boundary="abc"', "abc"),
        ("multipart/mixed; boundary=abc; charset=utf-8", "abc"),
        ("multipart/mixed;boundary=a-b_c", "a-b_c"),
    ],
)
def test_boundary_of(content_type, boundary):
    assert mp.boundary_of(content_type) == boundary


def test_boundary_missing():
    with pytest.raises(mp.MultipartError, match="without a boundary"):
        mp.boundary_of("multipart/mixed")
