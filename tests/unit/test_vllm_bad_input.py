"""Every bad input gets an OpenAI-style error with the right status; the server lives on."""

import asyncio
import json

import pytest
from eppkit.observability.contract import Http, Vllm
from eppkit.services.vllm.testing import chat_body, in_process, make_mock

pytestmark = pytest.mark.unit

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]


def run(coro):
    return asyncio.run(coro)


def parts_body(parts: list) -> dict:
    return {"model": "mock-llm", "messages": [{"role": "user", "content": parts}]}

CASES = [
    # (id, path, raw body or JSON-able, extra headers, status, text in message)
    ("invalid-json", CHAT, b'{"model": ', {}, 400, "Invalid JSON"),
    ("not-utf8", CHAT, b"\xff\xfe\x00", {}, 400, "Invalid JSON"),
    ("empty-body", CHAT, b"", {}, 400, "Invalid JSON"),
    ("json-array", CHAT, [1, 2], {}, 400, "must be a JSON object"),
    ("model-not-string", CHAT, {"model": 3, "messages": MSG}, {}, 400, "'model' must be a string"),
    ("unknown-model", CHAT, {"model": "gpt-9", "messages": MSG}, {}, 404, "The model `gpt-9` does not exist."),
    ("missing-messages", CHAT, {"model": "mock-llm"}, {}, 400, "'messages' is a required property"),
    ("messages-not-list", CHAT, {"model": "mock-llm", "messages": "hi"}, {}, 400, "'messages' must be an array"),
    ("messages-empty", CHAT, {"model": "mock-llm", "messages": []}, {}, 400, "at least one message"),
    ("message-not-object", CHAT, {"model": "mock-llm", "messages": ["hi"]}, {}, 400, "'messages[0]' must be an object"),
    ("role-missing", CHAT, {"model": "mock-llm", "messages": [{"content": "x"}]}, {}, 400, "'messages[0].role' must be a string"),
    ("content-number", CHAT, {"model": "mock-llm", "messages": [{"role": "user", "content": 5}]}, {}, 400, "'messages[0].content'"),
    ("content-part-no-type", CHAT, {"model": "mock-llm", "messages": [{"role": "user", "content": [{"text": "x"}]}]}, {}, 400, "with a 'type'"),
    ("text-part-no-text", CHAT, {"model": "mock-llm", "messages": [{"role": "user", "content": [{"type": "text"}]}]}, {}, 400, ".text' must be a string"),
    ("image-url-bad-base64", CHAT, parts_body([{"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}]), {}, 400, "media item 0 (image_url) at messages[0].content[0].image_url: the data URL is not valid base64"),
    ("image-url-number", CHAT, parts_body([{"type": "text", "text": "x"}, {"type": "image_url", "image_url": 12345}]), {}, 400, "media item 0 (image_url) at messages[0].content[1]"),
    ("image-url-not-a-url", CHAT, parts_body([{"type": "image_url", "image_url": {"url": "cat.png"}}]), {}, 400, "not an http(s) URL or a data URL"),
    ("audio-url-url-number", CHAT, parts_body([{"type": "audio_url", "audio_url": {"url": 7}}]), {}, 400, "media item 0 (audio_url)"),
    ("max-tokens-string", CHAT, chat_body(max_tokens="5"), {}, 400, "'max_tokens' must be an integer"),
    ("max-tokens-bool", CHAT, chat_body(max_tokens=True), {}, 400, "'max_tokens' must be an integer"),
    ("max-tokens-zero", CHAT, chat_body(max_tokens=0), {}, 400, "at least 1"),
    ("stream-string", CHAT, chat_body(stream="yes"), {}, 400, "'stream' must be a boolean"),
    ("stream-options-list", CHAT, chat_body(stream=True, stream_options=[]), {}, 400, "'stream_options' must be an object"),
    ("temperature-string", CHAT, chat_body(temperature="hot"), {}, 400, "'temperature' must be a number"),
    ("seed-float", CHAT, chat_body(seed=1.5), {}, 400, "'seed' must be an integer"),
    ("n-two", CHAT, chat_body(n=2), {}, 400, "n=1 only"),
    ("context-length", CHAT, chat_body(" ".join(["w"] * 60), max_tokens=50), {}, 400, "maximum context length is 100 tokens"),
    ("missing-prompt", COMP, {"model": "mock-llm"}, {}, 400, "Either prompt or prompt_embeds must be provided"),
    ("temperature-negative", CHAT, chat_body(temperature=-1), {}, 400, "temperature must be non-negative, got -1.0"),
    ("prompt-object", COMP, {"model": "mock-llm", "prompt": {"a": 1}}, {}, 400, "'prompt' must be"),
    ("bad-ttft-header", CHAT, chat_body(), {"x-mock-ttft-ms": "soon"}, 400, "x-mock-ttft-ms must be a number"),
    ("negative-itl-header", CHAT, chat_body(), {"x-mock-itl-ms": "-1"}, 400, "x-mock-itl-ms cannot be negative"),
    ("unknown-failure-header", CHAT, chat_body(), {"x-mock-failure": "meltdown"}, 400, "unknown failure type"),
    ("content-type-text", CHAT, chat_body(), {"Content-Type": "text/plain"}, 415, "Only 'application/json' is allowed"),
    ("content-type-form", CHAT, chat_body(), {"Content-Type": "application/x-www-form-urlencoded"}, 415, "Unsupported Media Type"),
    ("multipart-no-boundary", CHAT, b"--x\r\n\r\n{}", {"Content-Type": "multipart/mixed"}, 400, "boundary"),
    ("multipart-wrong-first-part", CHAT, b'--b\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n{}\r\n--b--', {"Content-Type": "multipart/mixed; boundary=b"}, 400, "first part must be 'request_payload'"),
    ("multipart-closed-early", CHAT, b"--b--", {"Content-Type": "multipart/mixed; boundary=b"}, 400, "closed before any part"),
]


@pytest.mark.parametrize("path, body, headers, status, text", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_openai_error(path, body, headers, status, text):
    mock, rec = make_mock(time_to_first_token=0, inter_token_latency=0, max_model_len=100)

    async def go():
        async with in_process(mock.make_app()) as c:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h = {"Content-Type": "application/json", **headers}
            r = await c.post(path, data=data, headers=h)
            payload = await r.json()
            ok = await c.post(CHAT, json=chat_body(max_tokens=1))  # still serving
            return r, payload, ok.status

    resp, payload, after = run(go())
    assert resp.status == status, payload
    assert text in payload["error"]["message"]
    assert payload["error"]["type"] and payload["error"]["code"] is not None
    assert resp.headers["x-inference-pod"] == "vllm-0"
    assert after == 200
    errors = [s for s in rec.by_name(Vllm.REQUEST) if s.status.status_code.name == "ERROR"]
    assert len(errors) == 1 and errors[0].attributes[Http.RESPONSE_STATUS_CODE] == status


@pytest.mark.parametrize("body, param", [
    (b'{"model": ', "body"),  # not JSON
    (b"[1, 2]", "body"),  # JSON, not an object
    (json.dumps({"model": "mock-llm"}).encode(), "body.messages"),  # a field missing
    (json.dumps({"model": "mock-llm", "messages": "hi"}).encode(), "body.messages"),  # of the wrong type
    (json.dumps(chat_body(stream="yes")).encode(), "body.stream"),
])
def test_a_body_the_request_model_refuses_is_a_bad_request_naming_its_place_as_vllm_says_it(body, param):
    mock, _ = make_mock()

    async def go():
        async with in_process(mock.make_app()) as c:
            r = await c.post(CHAT, data=body, headers={"Content-Type": "application/json"})
            return r.status, r.headers["Content-Type"], await r.json()

    status, content_type, payload = run(go())
    assert (status, content_type) == (400, "application/json")  # without charset, as vLLM's
    assert (payload["error"]["type"], payload["error"]["param"], payload["error"]["code"]) == ("Bad Request", param, 400)


def test_a_request_without_a_model_is_served_by_the_first_served_model_as_vllm_serves_it():
    mock, _ = make_mock(served_model_names=["first", "second"])

    async def go():
        async with in_process(mock.make_app()) as c:
            r = await c.post(CHAT, json={"messages": MSG, "max_tokens": 2})
            return r.status, await r.json()

    status, payload = run(go())
    assert status == 200 and payload["model"] == "first", payload


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_oversized_body_gets_413(chunked):
    mock, _ = make_mock(time_to_first_token=0, max_body_bytes=1000)
    big = json.dumps(chat_body("x" * 5000)).encode()

    async def gen():
        for i in range(0, len(big), 500):
            yield big[i : i + 500]

    async def go():
        async with in_process(mock.make_app()) as c:
            r = await c.post(CHAT, data=gen() if chunked else big, headers={"Content-Type": "application/json"})
            return r.status, await r.json()

    status, payload = run(go())
    assert status == 413
    assert "exceeds the limit of 1000 bytes" in payload["error"]["message"]


def test_wrong_method_is_an_openai_error_not_html():
    mock, _ = make_mock()

    async def go():
        async with in_process(mock.make_app()) as c:
            r = await c.get(CHAT)
            return r.status, await r.json()

    status, payload = run(go())
    assert status == 405 and "error" in payload
