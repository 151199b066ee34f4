"""The P/D sidecar against hostile or broken input: it calls only its own prefillers and encoders,
refuses bad media before calling anyone, and answers every failure as OpenAI-style JSON.

Real aiohttp servers on loopback stand in for the prefiller, the encoders and the decoder; each
counts the requests it got, so "nothing is called" is checked, not assumed.
"""

import asyncio
import json
from contextlib import AsyncExitStack

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from eppkit.services.pd_sidecar.server import HEADER_ENCODERS, HEADER_PREFILLER, PdSidecar, SidecarConfig
from eppkit.services.vllm.testing import SpanRecorder, in_process

pytestmark = pytest.mark.unit

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,aW1hZ2U="}}


def chat(*parts) -> dict:
    content = [{"type": "text", "text": "what is this?"}, *parts] if parts else "hello"
    return {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": content}]}


class Fake:
    """A loopback HTTP server answering every POST with ``answer`` and counting the calls."""

    def __init__(self, answer=None, *, text: str | None = None):
        self.calls: list[str] = []
        self.answer = answer if answer is not None else {"ok": True}
        self.text = text

    def app(self) -> web.Application:
        async def handle(request: web.Request) -> web.Response:
            self.calls.append(request.path_qs)
            await request.read()
            if self.text is not None:
                return web.Response(text=self.text)  # 200, text/plain: not the JSON a prefiller owes us
            return web.json_response(self.answer)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        return app


PREFILL_ANSWER = {"id": "p", "choices": [{"index": 0, "message": {"role": "assistant", "content": "A"}}],
                  "kv_transfer_params": {"remote_engine_id": "e", "remote_block_ids": [1]}}
DECODE_ANSWER = {"id": "d", "object": "chat.completion",
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "A B"}}]}


async def _sidecar(stack: AsyncExitStack, *, prefill: Fake, encoders: list[Fake], decode: Fake):
    async def serve(fake: Fake) -> str:
        server = TestServer(fake.app(), host="127.0.0.1")
        await stack.enter_async_context(server)
        return f"127.0.0.1:{server.port}"

    prefill_ep = await serve(prefill)
    encoder_eps = [await serve(e) for e in encoders]
    decode_ep = await serve(decode)
    sidecar = PdSidecar(SidecarConfig(decode_url=f"http://{decode_ep}", prefill_endpoints=[prefill_ep],
                                      encoder_endpoints=encoder_eps), SpanRecorder("pd-sidecar").tracer)
    client = await stack.enter_async_context(in_process(sidecar.make_app()))
    return client, prefill_ep, encoder_eps


def run_case(body: dict, headers: dict | None = None, *, prefill: Fake | None = None, encoders: int = 1,
             header_from=None):
    """POST ``body`` to a sidecar with one prefiller and ``encoders`` encoders; (status, json, fakes).

    ``header_from(prefill_ep, encoder_eps)`` builds the request headers once the ports are known.
    """
    prefill = prefill or Fake(PREFILL_ANSWER)
    enc = [Fake({"choices": [{"message": {"content": "<ec>"}}]}) for _ in range(encoders)]
    decode = Fake(DECODE_ANSWER)

    async def go():
        async with AsyncExitStack() as stack:
            client, prefill_ep, encoder_eps = await _sidecar(stack, prefill=prefill, encoders=enc, decode=decode)
            sent = dict(headers or {})
            if header_from is not None:
                sent.update(header_from(prefill_ep, encoder_eps))
            resp = await client.post("/v1/chat/completions", json=body, headers=sent)
            return resp.status, resp.headers.get("content-type", ""), await resp.text()

    status, content_type, text = asyncio.run(go())
    return status, content_type, text, {"prefill": prefill, "encoders": enc, "decode": decode}


def error_of(content_type: str, text: str) -> dict:
    assert content_type.startswith("application/json"), (content_type, text)
    body = json.loads(text)
    assert isinstance(body.get("error"), dict) and body["error"].get("message"), body
    return body["error"]


def nothing_called(fakes) -> bool:
    return not fakes["prefill"].calls and not fakes["decode"].calls and not any(e.calls for e in fakes["encoders"])


# -- the allowlist: a client cannot make the sidecar call an address of its choosing ------------------

@pytest.mark.parametrize("value", [
    "127.0.0.1:9",  # some other host:port
    "169.254.169.254:80",  # a metadata service
    "{prefill}/quitquitquit?x=",  # one of ours, with a path and a query after it
    "{prefill}@127.0.0.1:9",  # userinfo trick
    "http://{prefill}",  # a URL, not a bare host:port
    "{prefill},127.0.0.1:9",  # a list where one is expected
])
def test_a_prefiller_not_in_the_sidecars_list_is_a_400_naming_the_header_and_nothing_is_called(value):
    status, ctype, text, fakes = run_case(
        chat(), header_from=lambda p, e: {HEADER_PREFILLER: value.format(prefill=p)})
    assert status == 400, text
    error = error_of(ctype, text)
    assert HEADER_PREFILLER in error["message"] and error["param"] == HEADER_PREFILLER, error
    assert nothing_called(fakes), fakes


@pytest.mark.parametrize("value", ["127.0.0.1:9", "{enc}/admin?x=", "{enc},10.0.0.1:80", "http://{enc}"])
def test_an_encoder_not_in_the_sidecars_list_is_a_400_naming_the_header_and_nothing_is_called(value):
    status, ctype, text, fakes = run_case(
        chat(IMAGE), header_from=lambda p, e: {HEADER_ENCODERS: value.format(enc=e[0])})
    assert status == 400, text
    error = error_of(ctype, text)
    assert HEADER_ENCODERS in error["message"] and error["param"] == HEADER_ENCODERS, error
    assert nothing_called(fakes), fakes


def test_the_pickers_choice_among_the_sidecars_own_endpoints_is_used():
    status, ctype, text, fakes = run_case(
        chat(IMAGE), encoders=2,
        header_from=lambda p, e: {HEADER_PREFILLER: p, HEADER_ENCODERS: f"{e[1]}, {e[1]}"})
    assert status == 200, text
    assert len(fakes["prefill"].calls) == 1 and len(fakes["decode"].calls) == 1
    assert not fakes["encoders"][0].calls and len(fakes["encoders"][1].calls) == 1


# -- errors as OpenAI JSON -----------------------------------------------------------------------------

def test_a_prefiller_answering_200_with_a_non_json_body_is_a_502_naming_it():
    status, ctype, text, fakes = run_case(chat(), prefill=Fake(text="<html>not a completion</html>"))
    assert status == 502, text
    error = error_of(ctype, text)
    assert "prefill" in error["message"] and "127.0.0.1:" in error["message"], error
    assert not fakes["decode"].calls


@pytest.mark.parametrize("answer", [[1, 2], "just a string", {"choices": "nope"}])
def test_a_prefiller_answering_json_of_the_wrong_shape_is_a_502(answer):
    status, ctype, text, _ = run_case(chat(), prefill=Fake(answer))
    assert status == 502, text
    assert "prefill" in error_of(ctype, text)["message"]


# -- media items are checked before any encoder is asked --------------------------------------------

@pytest.mark.parametrize("image_url, why", [
    ({"url": "data:image/png;base64,@@@not base64@@@"}, "base64"),
    ({"url": 12345}, "string"),
    (12345, "string"),
    ({"url": "not a url at all"}, "URL"),
    ({"url": "ftp://example.com/cat.png"}, "URL"),
    ({}, "string"),
])
def test_a_bad_image_url_is_a_400_naming_the_item_and_nothing_is_called(image_url, why):
    bad = {"type": "image_url", "image_url": image_url}
    status, ctype, text, fakes = run_case(chat(IMAGE, bad))
    assert status == 400, text
    error = error_of(ctype, text)
    assert "media item 1" in error["message"] and "image_url" in error["message"], error
    assert why in error["message"], error
    assert error["param"] == "messages[0].content[2].image_url", error
    assert nothing_called(fakes), fakes
