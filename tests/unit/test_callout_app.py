"""The callout service in process: the /pick contract, test headers, errors, and its span."""

import asyncio

import pytest
from eppkit.services.callout.app import PickLatency, make_app
from eppkit.services.picker.settings import PickerSettings, create_picker
from eppkit.services.vllm.testing import SpanRecorder, in_process
from opentelemetry.trace import SpanKind

pytestmark = pytest.mark.unit

POOL = "vllm-0=127.0.0.1:8001@m-a,vllm-1=127.0.0.1:8002@m-a,vllm-2=127.0.0.1:8003@m-b"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
CHAT = {"model": "m-a", "messages": [{"role": "user", "content": "hi"}]}


def pick_all(requests, *, pool=POOL, scorer="round-robin", latency=PickLatency()):
    """POST each (body, headers) to /pick in order; returns (status, headers, json) per request and the spans."""
    rec = SpanRecorder("callout")
    app = make_app(create_picker(PickerSettings(scorer=scorer), pool), latency=latency, tracer=rec.tracer)

    async def go():
        out = []
        async with in_process(app) as client:
            for body, headers in requests:
                kwargs = {"data": body} if isinstance(body, (bytes, str)) else {"json": body}
                resp = await client.post("/pick", headers=headers or {}, **kwargs)
                out.append((resp.status, resp.headers, await resp.json()))
        return out

    return asyncio.run(go()), rec


def test_pick_answers_endpoint_in_body_and_header_as_the_contract_says():
    [(status, headers, body)], _ = pick_all([(CHAT, None)])
    assert status == 200
    assert body == {"endpoint": "127.0.0.1:8001", "fallbacks": ["127.0.0.1:8002"], "scorer": "round-robin",
                    "reason": "round-robin turn 0 -> 1 of 2"}
    # The primary then its fallbacks: the value the caller hands Envoy's picked cluster.
    assert headers["x-gateway-destination-endpoint"] == "127.0.0.1:8001,127.0.0.1:8002"


def test_pick_span_joins_the_callers_trace_and_names_the_decision():
    _, rec = pick_all([(CHAT, {"traceparent": TRACEPARENT, "x-gateway-model-name": "m-a"})])
    span = rec.one("callout.pick")
    assert span.kind == SpanKind.SERVER
    assert format(span.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert format(span.parent.span_id, "016x") == "b7ad6b7169203331"
    assert span.attributes["callout.endpoint"] == "127.0.0.1:8001"
    assert span.attributes["callout.endpoint.name"] == "vllm-0"
    assert span.attributes["callout.scorer"] == "round-robin"
    assert span.attributes["gen_ai.request.model"] == "m-a"


def test_model_header_narrows_the_pool_to_that_models_endpoints():
    results, _ = pick_all([(CHAT, {"x-gateway-model-name": "m-b"})] * 2 + [(CHAT, {"x-gateway-model-name": "m-a"})] * 3)
    assert [body["endpoint"] for _, _, body in results] == [
        "127.0.0.1:8003", "127.0.0.1:8003", "127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8001"]


def test_a_pool_without_models_serves_every_model():
    results, _ = pick_all([(CHAT, None)] * 3, pool="vllm-0=127.0.0.1:8001,vllm-1=127.0.0.1:8002,vllm-2=127.0.0.1:8003")
    assert [body["endpoint"] for _, _, body in results] == ["127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"]


def test_a_forced_pick_says_so_in_the_answer_and_the_span():
    [(status, _, body)], rec = pick_all([(CHAT, {"x-eppkit-force-endpoint": "vllm-1"})])
    assert (status, body["endpoint"], body["scorer"]) == (200, "127.0.0.1:8002", "forced")
    assert rec.one("callout.pick").attributes["callout.scorer"] == "forced"


@pytest.mark.parametrize(
    "pool, headers, status, code",
    [
        ("", {}, 503, "no_endpoint"),  # empty pool
        (POOL, {"x-gateway-model-name": "m-z"}, 404, "model_not_found"),  # no endpoint serves the model
        (POOL, {"x-eppkit-force-endpoint": "127.0.0.1:1"}, 503, "no_endpoint"),  # forced endpoint unknown
    ],
)
def test_refusals_are_openai_errors(pool, headers, status, code):
    [(got, _, body)], rec = pick_all([(CHAT, headers)], pool=pool)
    assert got == status
    assert body["error"]["code"] == code and body["error"]["type"] in ("ServiceUnavailableError", "NotFoundError")
    span = rec.one("callout.pick")
    assert "callout.endpoint" not in span.attributes
    assert span.attributes["http.response.status_code"] == status


def test_shed_header_is_a_429_openai_error_even_with_a_forced_endpoint():
    [(status, headers, body)], _ = pick_all([(CHAT, {"x-eppkit-shed": "true", "x-eppkit-force-endpoint": "vllm-0"})])
    assert status == 429
    assert body["error"]["type"] == "RateLimitError" and body["error"]["code"] == "shed"
    assert "x-gateway-destination-endpoint" not in headers


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'"model"', b"\xff\xfe", b'{"model": "m-a"'])
def test_body_that_is_not_a_json_object_is_a_400(body):
    [(status, _, answer)], _ = pick_all([(body, {"content-type": "application/json"})])
    assert status == 400
    assert answer["error"]["code"] == "invalid_json"


def test_prefix_cache_scorer_is_selectable_and_named_in_the_answer():
    shared = {"model": "m-a", "prompt": "The same long system prompt, repeated. " * 8}
    results, _ = pick_all([(shared, None), ({"model": "m-a", "prompt": "other"}, None), (shared, None)],
                          scorer="prefix-cache-scorer")
    first, _, third = (body for _, _, body in results)
    assert first["scorer"] == "prefix-cache-scorer"
    assert third["endpoint"] == first["endpoint"] and third["reason"].startswith("prefix hit")


def test_pick_latency_is_spent_inside_the_span():
    _, rec = pick_all([(CHAT, None)], latency=PickLatency(base_ms=60.0))
    span = rec.one("callout.pick")
    assert (span.end_time - span.start_time) / 1e6 >= 55.0


@pytest.mark.parametrize("base, jitter", [(-1.0, 0.0), (10.0, 4.0)])
def test_pick_latency_rejects_negative_values_and_jitter_over_30_percent(base, jitter):
    with pytest.raises(ValueError):
        PickLatency(base, jitter)


def test_health_reports_pool_size_and_scorer():
    app = make_app(create_picker(PickerSettings(scorer="prefix-cache-scorer"), POOL))

    async def go():
        async with in_process(app) as client:
            resp = await client.get("/health")
            return resp.status, await resp.json()

    assert asyncio.run(go()) == (200, {"status": "ok", "endpoints": 3, "scorer": "prefix-cache-scorer"})
