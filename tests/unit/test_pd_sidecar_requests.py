"""How the P/D sidecar derives encoder, prefill and decode requests from the client's."""

import json
import re

import pytest
from eppkit.services.pd_sidecar import requests as derive
from eppkit.services.pd_sidecar.server import _first_chunk, _has_content, _is_role_only

pytestmark = pytest.mark.unit

BODY = {
    "model": "m", "stream": True, "max_tokens": 50, "stream_options": {"include_usage": True},
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [
            {"type": "text", "text": "what is in these?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "input_audio", "input_audio": {"data": "BBBB", "format": "wav"}},
        ]},
    ],
}


def test_one_encoder_request_per_media_item_without_text():
    reqs = derive.encoder_requests(BODY)
    assert [item.type for item, _ in reqs] == ["image_url", "input_audio"]
    for item, req in reqs:
        assert req["max_tokens"] == 1 and req["stream"] is False
        (message,) = req["messages"]
        assert [part["type"] for part in message["content"]] == [item.type]


def test_text_only_request_has_no_encoder_work():
    assert derive.encoder_requests({"model": "m", "messages": [{"role": "user", "content": "hi"}]}) == []


def test_child_request_ids_follow_vllm_epd_proxy():
    assert re.fullmatch(r"req-1:3:[0-9a-f]{8}", derive.child_request_id("req-1", 3))


def test_prefill_request_asks_for_remote_decode_one_token_unstreamed():
    req = derive.prefill_request(BODY, seed=7)
    assert req["kv_transfer_params"]["do_remote_decode"] is True
    assert req["kv_transfer_params"]["do_remote_prefill"] is False
    assert req["max_tokens"] == 1 and req["stream"] is False and req["seed"] == 7
    assert "stream_options" not in req
    assert BODY["max_tokens"] == 50, "the client's body must not be modified"


def test_decode_request_carries_prefill_params_and_the_same_seed():
    params = {"do_remote_prefill": True, "remote_engine_id": "e", "remote_block_ids": [1], "remote_host": "h", "remote_port": 1}
    req = derive.decode_request(BODY, 7, params)
    assert req["kv_transfer_params"] == params and req["seed"] == 7
    assert req["stream"] is True and req["max_tokens"] == 50


def test_seed_is_the_clients_or_a_new_one():
    assert derive.request_seed({"seed": 5}) == 5
    assert isinstance(derive.request_seed({}), int)
    assert isinstance(derive.request_seed({"seed": True}), int) and derive.request_seed({"seed": True}) is not True


# (event, a token in it, the chat stream's opening chunk: a role and no content)
@pytest.mark.parametrize("event,has_content,role_only", [
    (b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n', True, False),
    (b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n', False, True),
    (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n', False, True),
    (b'data: {"choices":[{"delta":{"role":"assistant","content":"A"}}]}\n\n', True, False),
    (b'data: {"choices":[{"text":"y"}]}\n\n', True, False),
    (b"data: [DONE]\n\n", False, False),
    (b'data: {"choices":[],"usage":{}}\n\n', False, False),
    (b'data: {"error":{"message":"boom"}}\n\n', False, False),
])
def test_token_events_and_the_opening_chunk_are_told_apart(event, has_content, role_only):
    assert _has_content(event) is has_content
    assert _is_role_only(event) is role_only


def test_prefills_token_opens_a_chat_stream_in_vllms_order():
    events = _first_chunk({"id": "p", "created": 1, "model": "m"}, "A", "/v1/chat/completions").split(b"\n\n")
    deltas = [json.loads(e[len(b"data: "):])["choices"][0]["delta"] for e in events if e]
    assert deltas == [{"role": "assistant", "content": ""}, {"content": "A"}]
    (text,) = [e for e in _first_chunk({"id": "p"}, "A", "/v1/completions").split(b"\n\n") if e]
    assert json.loads(text[len(b"data: "):])["choices"][0]["text"] == "A"
