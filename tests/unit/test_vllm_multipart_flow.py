"""The two-phase (multipart) flow through the mock: prefill on part 1, decode after part 2."""

import asyncio
import json

import pytest
from eppkit.observability.contract import Vllm
from eppkit.services.vllm import multipart as mp
from eppkit.services.vllm.testing import chat_body, in_process, make_mock, sse_events

pytestmark = pytest.mark.unit

B = "eppkitBoundary42"
HEADERS = {"Content-Type": f"multipart/mixed; boundary={B}"}


def run(coro):
    return asyncio.run(coro)


class Body:
    """A request body the test writes to while the response is already coming back."""

    __test__ = False

    def __init__(self) -> None:
        self.q: asyncio.Queue = asyncio.Queue()

    def send(self, data: bytes) -> None:
        self.q.put_nowait(data)

    def end(self) -> None:
        self.q.put_nowait(None)

    async def __aiter__(self):
        while (chunk := await self.q.get()) is not None:
            yield chunk


def payload(**extra) -> bytes:
    return mp.encode_part(B, mp.PAYLOAD_PART, json.dumps(chat_body(max_tokens=4, **extra)).encode(), first=True)


@pytest.mark.eppkit_alone("first token within 200 ms")
def test_two_phase_flow_streams_first_token_before_metadata_then_decodes():
    mock, rec = make_mock(time_to_first_token=100, inter_token_latency=10)

    async def go():
        loop = asyncio.get_running_loop()
        body = Body()
        body.send(payload(stream=True))
        async with in_process(mock.make_app()) as c:
            t0 = loop.time()
            r = await c.post("/v1/chat/completions", data=body.__aiter__(), headers=HEADERS)
            headers_at = loop.time() - t0
            role = await r.content.readline()  # vLLM's order: a role-only chunk, then the first token's
            await r.content.readline()  # the blank line that ends it
            first = await r.content.readline()
            first_at = loop.time() - t0
            await asyncio.sleep(0.2)  # the EPP takes its time before part 2
            body.send(mp.encode_part(B, mp.METADATA_PART, b'{"prefill_endpoint": "10.0.0.1:8000"}'))
            await asyncio.sleep(0.05)
            body.send(mp.closing(B))
            body.end()
            rest = await r.text()
            return r, headers_at, role, first, first_at, rest

    resp, headers_at, role, first, first_at, rest = run(go())
    assert resp.status == 200 and resp.headers["x-inference-pod"] == "vllm-0"
    assert 0.09 < headers_at < 0.2 and first_at < 0.2
    assert json.loads(role[len(b"data: "):])["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert json.loads(first[len(b"data: "):])["choices"][0]["delta"]["content"]
    events = sse_events(rest)
    assert events[-1] == "[DONE]"
    final = events[-2]
    meta = final["multipart_metadata"]
    assert meta["received"] is True
    assert meta["content"] == {"prefill_endpoint": "10.0.0.1:8000"}
    assert meta["waited_ms"] > 200
    tokens = [e for e in events[:-1] if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert len(tokens) == 3  # the other 3 of 4, after the metadata

    prefill, wait, decode = rec.one(Vllm.PREFILL), rec.one(Vllm.AWAIT_METADATA), rec.one(Vllm.DECODE)
    assert prefill.end_time <= wait.start_time and wait.end_time <= decode.start_time
    assert (wait.end_time - wait.start_time) / 1e6 > 240
    assert rec.one(Vllm.REQUEST).attributes[Vllm.MULTIPART] is True
    assert "prefill_endpoint" in wait.attributes[Vllm.MULTIPART_METADATA]


def test_multipart_non_streaming_returns_json_with_the_metadata():
    mock, _ = make_mock(time_to_first_token=20, inter_token_latency=1)
    body = payload() + mp.encode_part(B, mp.METADATA_PART, b'{"k": "v"}') + mp.closing(B)

    async def go():
        async with in_process(mock.make_app()) as c:
            r = await c.post("/v1/chat/completions", data=body, headers=HEADERS)
            return r.headers["content-type"], await r.json()

    ctype, answer = run(go())
    assert ctype.startswith("application/json")
    assert answer["multipart_metadata"]["content"] == {"k": "v"}
    assert answer["usage"]["completion_tokens"] == 4


def test_late_metadata_ends_in_a_clear_error_after_the_timeout():
    mock, rec = make_mock(time_to_first_token=10, multipart_metadata_timeout=5000)

    async def go():
        body = Body()
        body.send(payload(stream=True))
        async with in_process(mock.make_app()) as c:
            r = await c.post("/v1/chat/completions", data=body.__aiter__(), headers={**HEADERS, "x-mock-metadata-timeout-ms": "150"})
            text = await asyncio.wait_for(r.text(), 3)
            body.end()
            return r.status, text

    status, text = run(go())
    assert status == 200  # headers went out with the first token
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    err = events[-2]["error"]
    assert "did not arrive within 150 ms" in err["message"] and err["code"] == "metadata_timeout"
    wait = rec.one(Vllm.AWAIT_METADATA)
    assert wait.status.status_code.name == "ERROR"
    assert 140 < (wait.end_time - wait.start_time) / 1e6 < 400
    assert not rec.by_name(Vllm.DECODE)


@pytest.mark.parametrize(
    "tail, message",
    [
        (mp.closing(B), "closed without a 'metadata' part"),
        (b"", "ended"),  # body ends with no closing boundary
        (mp.encode_part(B, "other", b"x") + mp.closing(B), "parts after the payload: other"),
    ],
    ids=["closed-without-metadata", "eof-without-boundary", "wrong-part-name"],
)
def test_missing_metadata_ends_in_a_clear_error(tail, message):
    mock, _ = make_mock(time_to_first_token=10)

    async def go():
        async with in_process(mock.make_app()) as c:
            r = await c.post("/v1/chat/completions", data=payload(stream=True) + tail, headers=HEADERS)
            return sse_events(await r.text())

    events = run(go())
    assert message in events[-2]["error"]["message"]
    assert events[-2]["error"]["code"] == "metadata_missing"


def _post_part_head(declared, **config):
    """A multipart body whose payload part declares ``declared`` bytes; (status, JSON answer)."""
    mock, _ = make_mock(time_to_first_token=10, **config)
    head = (f"--{B}\r\nContent-Disposition: form-data; name=\"{mp.PAYLOAD_PART}\"\r\n"
            f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n").encode()

    async def go():
        async with in_process(mock.make_app()) as c:
            r = await c.post("/v1/chat/completions", data=head + b"{}", headers=HEADERS)
            return r.status, await r.json()

    return run(go())


@pytest.mark.parametrize("declared", [5000, 10**12], ids=["over-limit", "absurd"])
def test_a_part_declaring_more_than_the_body_limit_is_the_documented_413(declared):
    # The EPP writes the client's JSON as part 1 with its Content-Length: a body over the mock's
    # --max-body-bytes shows up as a part too large, before any of it has to be read.
    status, body = _post_part_head(declared, max_body_bytes=1000)
    assert status == 413, body
    assert "1000" in body["error"]["message"], body


def test_a_negative_part_length_is_still_a_400():
    status, body = _post_part_head(-1)
    assert status == 400 and "Content-Length" in body["error"]["message"], body
