"""The mock says what it received of a request's body on every answer, errors included: its length and sha256 in
headers, and (asked with ``x-mock-echo-body: 1``) the bytes themselves beside the answer's fields, so a body cut short
or changed on the way can be shown, whatever the mock made of it."""

import asyncio
import base64
import hashlib
import json

import pytest
from eppkit.services.pod_headers import HEADER_BODY_BYTES, HEADER_BODY_SHA256, HEADER_ECHO_BODY, RECEIVED_BODY_FIELD
from eppkit.services.vllm.testing import chat_body, in_process, make_mock, sse_events

pytestmark = pytest.mark.unit

CHAT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}
ECHO = {**JSON, HEADER_ECHO_BODY: "1"}


def post(data: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
    mock, _ = make_mock(time_to_first_token=0, inter_token_latency=0)

    async def go():
        async with in_process(mock.make_app()) as c:
            r = await c.post(CHAT, data=data, headers=headers)
            return r.status, dict(r.headers), await r.text()

    return asyncio.run(go())


def received(payload: dict) -> bytes:
    return base64.b64decode(payload[RECEIVED_BODY_FIELD])


def test_vllm_answer_reports_the_length_and_digest_of_the_body_it_received():
    data = json.dumps(chat_body(max_tokens=1)).encode()
    status, headers, text = post(data, ECHO)
    assert status == 200, text
    assert headers[HEADER_BODY_BYTES] == str(len(data))
    assert headers[HEADER_BODY_SHA256] == hashlib.sha256(data).hexdigest()
    assert received(json.loads(text)) == data


def test_vllm_error_answer_reports_and_echoes_a_body_cut_short():
    # what an EPP that cuts the body leaves the backend: no JSON any more, answered 400, and still said in full
    whole = json.dumps(chat_body("x" * 5000, max_tokens=1)).encode()
    cut = whole[:1000]
    status, headers, text = post(cut, ECHO)
    payload = json.loads(text)
    assert status == 400 and "Invalid JSON" in payload["error"]["message"], text
    assert set(payload["error"]) == {"message", "type", "param", "code"}  # still OpenAI's error, the copy beside it
    assert (headers[HEADER_BODY_BYTES], headers[HEADER_BODY_SHA256]) == ("1000", hashlib.sha256(cut).hexdigest())
    assert received(payload) == cut


def test_vllm_injected_failure_answer_echoes_the_body_it_received():
    data = json.dumps(chat_body(max_tokens=1)).encode()
    status, headers, text = post(data, {**ECHO, "x-mock-failure": "500"})
    payload = json.loads(text)
    assert status == 500 and payload["error"]["code"] == "server_error", text
    assert headers[HEADER_BODY_BYTES] == str(len(data)) and received(payload) == data


def test_vllm_answer_without_the_echo_header_carries_no_copy_of_the_body():
    for data in (json.dumps(chat_body(max_tokens=1)).encode(), b'{"model": '):
        status, headers, text = post(data, JSON)
        assert RECEIVED_BODY_FIELD not in json.loads(text), text
        assert headers[HEADER_BODY_BYTES] == str(len(data)), status


def test_vllm_stream_reports_the_body_in_its_headers_and_last_chunk():
    data = json.dumps(chat_body(max_tokens=2, stream=True)).encode()
    status, headers, text = post(data, ECHO)
    events = sse_events(text)
    assert status == 200 and events[-1] == "[DONE]", text
    assert headers[HEADER_BODY_BYTES] == str(len(data))
    assert received(events[-2]) == data


def test_vllm_answer_to_a_body_never_read_reports_no_length():
    # refused on its Content-Type before the body is read: nothing to say it received
    status, headers, _ = post(json.dumps(chat_body()).encode(), {"Content-Type": "text/plain", HEADER_ECHO_BODY: "1"})
    assert status == 415 and HEADER_BODY_BYTES not in headers and HEADER_BODY_SHA256 not in headers
