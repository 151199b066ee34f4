"""Prefiller and encoder picks (pd / epd / ttft flows) on the wire: the EPP's headers and the callout's answer.

The picks themselves are the picker core's (tests/unit/test_picker_core.py)."""

import asyncio
import json

import pytest
from eppkit.services.callout.app import make_app
from eppkit.services.epp.stream import StreamProcessor
from eppkit.services.picker.settings import PickerSettings, create_picker
from eppkit.services.vllm.testing import SpanRecorder, in_process

from tests.support.epp_stream import Spans, body_msg, feed, headers_msg

pytestmark = pytest.mark.unit

RR = PickerSettings(scorer="round-robin")
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}


def chat(images: int = 0) -> dict:
    content = [{"type": "text", "text": "look"}] + [IMAGE] * images if images else "plain text"
    return {"model": "mock-llm", "messages": [{"role": "user", "content": content}]}


# --- EPP ---------------------------------------------------------------------------------------

def epp_stream(spans, prefill="vllm-p0=127.0.0.1:9001,vllm-p1=127.0.0.1:9002",
               encoders="encoder-0=127.0.0.1:7001,encoder-1=127.0.0.1:7002"):
    picker = create_picker(RR, "vllm-d0=127.0.0.1:8001", prefill=prefill, encoders=encoders)
    return StreamProcessor(picker, spans.tracer)


def epp_headers(body: dict, extra=None):
    spans = Spans()
    out = feed(epp_stream(spans), headers_msg(path="/v1/chat/completions", extra=extra),
               body_msg(json.dumps(body).encode(), True))
    resp = out[1][0]
    if resp.WhichOneof("response") == "immediate_response":
        return resp.immediate_response, None, spans
    m = resp.request_headers.response.header_mutation
    return {h.header.key: h.header.raw_value.decode() for h in m.set_headers}, list(m.remove_headers), spans


def test_epp_names_a_prefiller_and_one_encoder_per_media_item():
    headers, removed, spans = epp_headers(chat(images=1))
    assert headers["x-gateway-destination-endpoint"] == "127.0.0.1:8001"
    assert headers["x-prefiller-host-port"] == "127.0.0.1:9001"
    assert headers["x-encoder-hosts-ports"] == "127.0.0.1:7001"
    assert removed == []
    pick = spans.by_name("epp.pick")
    assert pick.attributes["epp.prefiller.name"] == "vllm-p0"
    assert pick.attributes["epp.encoders.names"] == "encoder-0"


def test_epp_text_only_request_gets_no_encoders_and_client_stage_headers_are_dropped():
    headers, removed, _ = epp_headers(chat(), extra={"x-encoder-hosts-ports": "10.0.0.1:1"})
    assert "x-encoder-hosts-ports" not in headers and "x-encoder-hosts-ports" in removed
    assert headers["x-prefiller-host-port"] == "127.0.0.1:9001"


def test_epp_force_headers_pick_named_stages():
    headers, _, spans = epp_headers(chat(images=2), extra={"x-eppkit-force-prefiller": "vllm-p1",
                                                            "x-eppkit-force-encoders": "encoder-1"})
    assert headers["x-prefiller-host-port"] == "127.0.0.1:9002"
    assert headers["x-encoder-hosts-ports"] == "127.0.0.1:7002"
    assert spans.by_name("epp.pick").attributes["epp.prefill.reason"].startswith("forced")


def test_epp_forcing_an_unknown_prefiller_is_a_503():
    imm, _, _ = epp_headers(chat(), extra={"x-eppkit-force-prefiller": "vllm-p9"})
    assert imm.status.code == 503
    assert "x-eppkit-force-prefiller" in json.loads(imm.body)["error"]["message"]


def test_epp_without_stage_pools_touches_no_stage_header():
    spans = Spans()
    stream = epp_stream(spans, prefill="", encoders="")
    out = feed(stream, headers_msg(path="/v1/chat/completions"), body_msg(json.dumps(chat(1)).encode(), True))
    m = out[1][0].request_headers.response.header_mutation
    assert {h.header.key for h in m.set_headers} == {"x-gateway-destination-endpoint", "content-length"}
    assert list(m.remove_headers) == []


# --- callout -----------------------------------------------------------------------------------

def callout_picks(requests, *, prefill="vllm-p0=127.0.0.1:9001,vllm-p1=127.0.0.1:9002",
                  encoders="encoder-0=127.0.0.1:7001,encoder-1=127.0.0.1:7002"):
    rec = SpanRecorder("callout")
    picker = create_picker(RR, "vllm-d0=127.0.0.1:8001", prefill=prefill, encoders=encoders)
    app = make_app(picker, tracer=rec.tracer)

    async def go():
        out = []
        async with in_process(app) as client:
            for body, headers in requests:
                resp = await client.post("/pick", json=body, headers=headers or {})
                out.append((resp.status, resp.headers, await resp.json()))
        return out

    return asyncio.run(go()), rec


def test_callout_answers_prefiller_and_encoders_in_json_and_headers():
    [(status, headers, body), (_, headers2, body2)], rec = callout_picks([(chat(images=1), None), (chat(), None)])
    assert status == 200
    assert body["prefiller"] == headers["x-prefiller-host-port"] == "127.0.0.1:9001"
    assert body["encoders"] == ["127.0.0.1:7001"] and headers["x-encoder-hosts-ports"] == "127.0.0.1:7001"
    assert body2["prefiller"] == "127.0.0.1:9002" and "encoders" not in body2
    assert "x-encoder-hosts-ports" not in headers2
    span = rec.by_name("callout.pick")[0]
    assert span.attributes["callout.prefiller.name"] == "vllm-p0"
    assert span.attributes["callout.encoders.names"] == "encoder-0"


def test_callout_force_headers_and_unknown_names():
    [(ok, headers, _), (bad, _, err)], _ = callout_picks([
        (chat(images=1), {"x-eppkit-force-prefiller": "vllm-p1", "x-eppkit-force-encoders": "encoder-1"}),
        (chat(), {"x-eppkit-force-prefiller": "nope"}),
    ])
    assert ok == 200 and headers["x-prefiller-host-port"] == "127.0.0.1:9002"
    assert headers["x-encoder-hosts-ports"] == "127.0.0.1:7002"
    assert bad == 503 and err["error"]["code"] == "no_endpoint"


def test_callout_without_stage_pools_answers_as_before():
    [(status, headers, body)], _ = callout_picks([(chat(images=1), None)], prefill="", encoders="")
    assert status == 200 and set(body) == {"endpoint", "fallbacks", "scorer", "reason"}
    assert "x-prefiller-host-port" not in headers
