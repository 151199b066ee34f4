"""The mock encoder: one span per media item, the shared encoder cache, P/PD hit or miss."""

import asyncio

import pytest
from eppkit.observability.contract import Encoder, Media, Mock, Vllm
from eppkit.services.encoder.config import ConfigError, EncoderConfig
from eppkit.services.encoder.server import MockEncoder
from eppkit.services.openai_server.ec_cache import EncoderCache
from eppkit.services.openai_server.media import item_hash, media_items
from eppkit.services.vllm.testing import SpanRecorder, in_process, make_mock

pytestmark = pytest.mark.unit

IMG = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 4096}}
AUDIO = {"type": "audio_url", "audio_url": {"url": "http://127.0.0.1/a.wav"}}
INPUT_AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGR" * 10, "format": "wav"}}
TRACEPARENT = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"


def run(coro):
    return asyncio.run(coro)


def mm_body(*items, text=None, **extra):
    content = ([{"type": "text", "text": text}] if text else []) + list(items)
    return {"model": "mock-llm", "messages": [{"role": "user", "content": content}], **extra}


def make_encoder(**kw):
    rec = SpanRecorder("encoder")
    return MockEncoder(EncoderConfig(**kw).validate(), rec.tracer), rec


def test_media_items_and_hashes_are_stable():
    items = media_items(mm_body(IMG, AUDIO, INPUT_AUDIO, text="what is this"))
    assert [i.type for i in items] == ["image_url", "audio_url", "input_audio"]
    assert items[0].hash == item_hash("image_url", IMG["image_url"])
    assert items[0].hash == media_items(mm_body(IMG))[0].hash  # text does not change the hash
    assert len({i.hash for i in items}) == 3
    assert items[0].size_bytes == len(IMG["image_url"]["url"])


@pytest.mark.eppkit_alone("encode time within 30 ms")
def test_encoder_spans_one_per_item_and_fills_the_cache(tmp_path):
    enc, rec = make_encoder(instance="e0", encode_latency=40, ec_cache_dir=str(tmp_path))

    async def go():
        async with in_process(enc.make_app()) as c:
            r = await c.post("/v1/chat/completions", json=mm_body(IMG, INPUT_AUDIO, max_tokens=1), headers={"traceparent": TRACEPARENT})
            return r, await r.json()

    resp, body = run(go())
    assert resp.status == 200 and resp.headers["x-inference-pod"] == "e0"
    assert body["usage"]["completion_tokens"] == 1 and body["choices"][0]["finish_reason"] == "length"
    spans = sorted(rec.by_name(Encoder.ENCODE), key=lambda s: s.start_time)
    assert [s.attributes[Media.TYPE] for s in spans] == ["image", "audio"]
    assert [s.attributes[Media.HASH] for s in spans] == body["mm_hashes"]
    for s in spans:
        assert format(s.parent.span_id, "016x") == "c7ad6b7169203331"
        assert (s.end_time - s.start_time) / 1e6 == pytest.approx(40, abs=30)
    assert spans[0].end_time <= spans[1].start_time
    cache = EncoderCache(tmp_path)
    assert all(cache.contains(h) for h in body["mm_hashes"])
    assert cache.get(body["mm_hashes"][0])["instance"] == "e0"


def test_an_injected_failure_leaves_a_failed_span_per_item():
    enc, rec = make_encoder(instance="e0")

    async def go():
        async with in_process(enc.make_app()) as c:
            r = await c.post("/v1/chat/completions", json=mm_body(IMG, max_tokens=1),
                             headers={"traceparent": TRACEPARENT, "x-mock-failure": "500"})
            return r.status

    assert run(go()) == 500
    (span,) = rec.by_name(Encoder.ENCODE)
    assert span.status.status_code.name == "ERROR" and span.attributes[Mock.FAILURE] == "500"
    assert format(span.parent.span_id, "016x") == "c7ad6b7169203331"


def test_encode_time_grows_with_item_size():
    enc, rec = make_encoder(encode_latency=10, encode_time_per_kb=20)

    async def go():
        async with in_process(enc.make_app()) as c:
            await c.post("/v1/chat/completions", json=mm_body(IMG))  # ~4 KiB -> 10 + 80 ms

    run(go())
    (span,) = rec.by_name(Encoder.ENCODE)
    assert span.attributes[Encoder.CONFIGURED_MS] == pytest.approx(10 + 20 * len(IMG["image_url"]["url"]) / 1024)


def test_encoder_streaming_and_headers_override():
    enc, rec = make_encoder(encode_latency=500)

    async def go():
        async with in_process(enc.make_app()) as c:
            r = await c.post("/v1/chat/completions", json=mm_body(AUDIO, stream=True), headers={"x-mock-encode-ms": "5"})
            return await r.text()

    text = run(go())
    assert text.rstrip().endswith("data: [DONE]")
    (span,) = rec.by_name(Encoder.ENCODE)
    assert (span.end_time - span.start_time) / 1e6 < 100


@pytest.mark.parametrize(
    "body, headers, status",
    [
        (b"{", {}, 400),
        (b'{"model": "mock-llm"}', {}, 400),
        (b'{"model": "other", "messages": [{"role": "user", "content": "x"}]}', {}, 404),
        (b'{"model": "mock-llm", "messages": [{"role": "user", "content": "x"}]}', {"x-mock-failure": "500"}, 500),
        (b'{"model": "mock-llm", "messages": [{"role": "user", "content": "x"}]}', {"x-mock-failure": "429"}, 429),
        (b'{"model": "mock-llm", "messages": [{"role": "user", "content": "x"}]}', {"x-mock-encode-ms": "x"}, 400),
    ],
)
def test_encoder_bad_input(body, headers, status):
    enc, _ = make_encoder()

    async def go():
        async with in_process(enc.make_app()) as c:
            r = await c.post("/v1/chat/completions", data=body, headers={"Content-Type": "application/json", **headers})
            return r.status, await r.json(), r.headers["x-inference-pod"]

    got, payload, pod = run(go())
    assert got == status and "error" in payload and pod == "encoder-0"


@pytest.mark.eppkit_alone("prefill time within 30 ms")
def test_prefill_reports_encoder_cache_hits_and_misses(tmp_path):
    enc, _ = make_encoder(encode_latency=1, ec_cache_dir=str(tmp_path))
    p, p_spans = make_mock(role="prefill", time_to_first_token=10, ec_cache_dir=str(tmp_path), ec_miss_latency=50)
    other = {"type": "image_url", "image_url": {"url": "http://127.0.0.1/other.png"}}

    async def go():
        async with in_process(enc.make_app()) as ec, in_process(p.make_app()) as pc:
            await ec.post("/v1/chat/completions", json=mm_body(IMG, max_tokens=1))  # E caches IMG only
            r = await pc.post("/v1/chat/completions", json=mm_body(IMG, other, text="describe", max_tokens=1))
            return r.status

    assert run(go()) == 200
    prefill = p_spans.one(Vllm.PREFILL)
    assert prefill.attributes[Vllm.EC_CACHE_HITS] == 1
    assert prefill.attributes[Vllm.EC_CACHE_MISSES] == 1
    assert (prefill.end_time - prefill.start_time) / 1e6 == pytest.approx(10 + 50, abs=30)


def test_encoder_config_validation():
    with pytest.raises(ConfigError, match="cannot be negative"):
        EncoderConfig(encode_latency=-1).validate()
    with pytest.raises(ConfigError, match="30%"):
        EncoderConfig(encode_latency=10, encode_latency_std_dev=5).validate()


def test_cache_rejects_names_that_are_not_hashes(tmp_path):
    with pytest.raises(ValueError):
        EncoderCache(tmp_path).contains("../../etc/passwd")
