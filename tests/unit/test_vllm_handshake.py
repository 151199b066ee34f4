"""The NixlConnector-style P/D handshake between two mock instances."""

import asyncio

import pytest
from eppkit.observability.contract import GenAi, Vllm
from eppkit.services.openai_server import handshake
from eppkit.services.vllm.testing import chat_body, in_process, make_mock, sse_events

pytestmark = pytest.mark.unit

P_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
            "remote_block_ids": None, "remote_host": None, "remote_port": None}


def run(coro):
    return asyncio.run(coro)


def dur_ms(span):
    return (span.end_time - span.start_time) / 1e6


@pytest.mark.eppkit_alone("KV transfer within 30 ms")
def test_prefill_then_decode_handshake():
    p, p_spans = make_mock(instance="p0", role="prefill", time_to_first_token=120, inter_token_latency=10, kv_host="10.0.0.5", kv_port=5601)
    d, d_spans = make_mock(instance="d0", role="decode", time_to_first_token=999, inter_token_latency=10, kv_cache_transfer_latency=40)
    prompt = chat_body("tell me a story", seed=5)

    async def go():
        async with in_process(p.make_app()) as pc, in_process(d.make_app()) as dc:
            pr = await pc.post("/v1/chat/completions", json={**prompt, "max_tokens": 1, "kv_transfer_params": P_PARAMS})
            pbody = await pr.json()
            dr = await dc.post("/v1/chat/completions", json={**prompt, "max_tokens": 5, "kv_transfer_params": pbody["kv_transfer_params"]})
            return pbody, await dr.json()

    pbody, dbody = run(go())
    params = pbody["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_engine_id"] == handshake.engine_id("p0")
    assert (params["remote_host"], params["remote_port"]) == ("10.0.0.5", 5601)
    assert isinstance(params["remote_block_ids"], list) and params["remote_block_ids"]
    assert pbody["usage"]["completion_tokens"] == 1
    p_token = pbody["choices"][0]["message"]["content"]
    d_text = dbody["choices"][0]["message"]["content"]
    assert d_text.split()[0] == p_token  # same seed + prompt: decode's first token is prefill's
    assert dbody["usage"]["completion_tokens"] == 5 and dbody["kv_transfer_params"] is None

    # prefill side: prefill only, no decode span
    assert p_spans.names().count(Vllm.PREFILL) == 1 and not p_spans.by_name(Vllm.DECODE)
    assert p_spans.one(Vllm.REQUEST).attributes[Vllm.KV_TRANSFER_PARAMS] == "do_remote_decode"
    # decode side: KV transfer instead of prefill, then decode
    assert not d_spans.by_name(Vllm.PREFILL)
    kv = d_spans.one(Vllm.KV_TRANSFER)
    assert dur_ms(kv) == pytest.approx(40, abs=30)
    assert kv.attributes[Vllm.KV_REMOTE_ENGINE_ID] == handshake.engine_id("p0")
    assert kv.end_time <= d_spans.one(Vllm.DECODE).start_time
    assert d_spans.one(Vllm.REQUEST).attributes[GenAi.LATENCY_TIME_TO_FIRST_TOKEN] < 0.2  # not 999 ms


def test_prefill_handshake_in_a_stream_puts_params_in_the_final_chunk():
    p, _ = make_mock(role="prefill", time_to_first_token=0)

    async def go():
        async with in_process(p.make_app()) as c:
            r = await c.post("/v1/completions", json={"model": "mock-llm", "prompt": "x", "stream": True, "kv_transfer_params": P_PARAMS})
            return sse_events(await r.text())

    events = run(go())
    assert events[-1] == "[DONE]"
    final = events[-2]
    assert final["choices"][0]["finish_reason"] == "length"
    assert final["kv_transfer_params"]["do_remote_prefill"] is True
    assert len([e for e in events[:-1] if e["choices"][0].get("text")]) == 1


@pytest.mark.eppkit_alone("KV transfer within 30 ms")
def test_kv_transfer_per_token_scales_with_prompt():
    d, spans = make_mock(kv_cache_transfer_time_per_token=2, inter_token_latency=0)
    params = handshake.prefill_response_params(instance="p", request_id="r", prompt_tokens=50, block_size=16, host="h", port=1)

    async def go():
        async with in_process(d.make_app()) as c:
            prompt = " ".join(["w"] * 50)
            r = await c.post("/v1/completions", json={"model": "mock-llm", "prompt": prompt, "max_tokens": 2, "kv_transfer_params": params})
            return r.status

    assert run(go()) == 200
    assert dur_ms(spans.one(Vllm.KV_TRANSFER)) == pytest.approx(100, abs=30)


@pytest.mark.parametrize(
    "params, message",
    [
        ("yes", "must be an object"),
        ({"do_remote_decode": "true"}, "do_remote_decode must be a boolean"),
        ({"do_remote_decode": True, "do_remote_prefill": True}, "cannot ask for both"),
        ({"do_remote_prefill": True, "remote_engine_id": "e"}, "lacks remote_block_ids, remote_host, remote_port"),
        ({"do_remote_prefill": True, "remote_engine_id": "e", "remote_block_ids": 3, "remote_host": "h", "remote_port": 1}, "remote_block_ids must be a list"),
        ({"do_remote_prefill": True, "remote_engine_id": "e", "remote_block_ids": [], "remote_host": "h", "remote_port": "1"}, "remote_port must be an integer"),
    ],
)
def test_malformed_kv_transfer_params_get_400(params, message):
    d, _ = make_mock(time_to_first_token=0)

    async def go():
        async with in_process(d.make_app()) as c:
            r = await c.post("/v1/chat/completions", json=chat_body(kv_transfer_params=params))
            return r.status, await r.json()

    status, body = run(go())
    assert status == 400
    assert message in body["error"]["message"]
    assert body["error"]["param"] == "kv_transfer_params"


def test_block_ids_cover_the_prompt():
    assert len(handshake.block_ids("r", 33, 16)) == 3
    assert len(handshake.block_ids("r", 0, 16)) == 1
    assert handshake.block_ids("r", 40, 16) == handshake.block_ids("r", 40, 16)
