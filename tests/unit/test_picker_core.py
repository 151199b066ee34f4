"""The picker core without a transport: shed and force hooks, candidates, fallbacks, stage picks."""

import asyncio
import json

import pytest
from eppkit.services.picker.decision import PickError
from eppkit.services.picker.request import parse_request
from eppkit.services.picker.settings import PickerSettings, create_picker

pytestmark = pytest.mark.unit

POOL = "vllm-0=127.0.0.1:8001@m-a,vllm-1=127.0.0.1:8002@m-a,vllm-2=127.0.0.1:8003@m-b"
RR = PickerSettings(scorer="round-robin")
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}}


def request(headers=None, model="m-a", images=0):
    content = [{"type": "text", "text": "look"}] + [IMAGE] * images if images else "hi"
    body = {"model": model, "messages": [{"role": "user", "content": content}]}
    return parse_request(dict(headers or {}), json.dumps(body).encode())


def pick(picker, req):
    return asyncio.run(picker.pick(req))


def refusal(picker, req) -> PickError:
    with pytest.raises(PickError) as err:
        pick(picker, req)
    return err.value


def test_candidates_are_the_endpoints_serving_the_model_in_turn():
    picker = create_picker(RR, POOL)
    assert [pick(picker, request()).name for _ in range(3)] == ["vllm-0", "vllm-1", "vllm-0"]
    decision = pick(picker, request({"x-gateway-model-name": "m-b"}, model="m-a"))  # the router's header wins
    assert (decision.name, decision.scorer, decision.fallbacks) == ("vllm-2", "round-robin", [])


def test_fallbacks_follow_the_scorers_order_up_to_max_fallbacks():
    picker = create_picker(PickerSettings(scorer="round-robin", max_fallbacks=1), "a=127.0.0.1:1,b=127.0.0.1:2,c=127.0.0.1:3")
    decision = pick(picker, request())
    assert (decision.address, decision.fallbacks) == ("127.0.0.1:1", ["127.0.0.1:2"])
    assert decision.metadata_value == "127.0.0.1:1,127.0.0.1:2"


@pytest.mark.parametrize("force, model, expected", [
    ("vllm-1", "m-a", "vllm-1"),  # by instance name
    ("127.0.0.1:8002", "m-a", "vllm-1"),  # by address
    ("127.0.0.1:9, vllm-1", "m-a", "vllm-1"),  # a list: the first one in the pool
    ("vllm-2, vllm-0", "m-a", "vllm-0"),  # a list: the first one serving the model
])
def test_force_header_picks_the_named_endpoint_health_aside(force, model, expected):
    picker = create_picker(RR, POOL)
    for ep in picker.pool.endpoints:
        picker.pool.record_scrape(ep, None, error="refused")
    decision = pick(picker, request({"x-eppkit-force-endpoint": force}, model=model))
    assert (decision.name, decision.scorer) == (expected, "forced")
    assert decision.reason == f"x-eppkit-force-endpoint: {force}"


@pytest.mark.parametrize("headers, pool, status, code", [
    ({"x-eppkit-force-endpoint": "127.0.0.1:1"}, POOL, 503, "no_endpoint"),  # not in the pool
    ({"x-eppkit-force-endpoint": "vllm-2"}, POOL, 503, "no_endpoint"),  # serves another model
    ({"x-gateway-model-name": "m-z"}, POOL, 404, "model_not_found"),  # nobody serves it
    ({}, "", 503, "no_endpoint"),  # empty pool
    ({"x-eppkit-shed": "true", "x-eppkit-force-endpoint": "vllm-0"}, POOL, 429, "shed"),  # shed before force
])
def test_refusals_carry_the_clients_status_and_code(headers, pool, status, code):
    err = refusal(create_picker(RR, pool), request(headers))
    assert (err.status, err.code) == (status, code), err.message


def test_all_endpoints_down_is_a_503_naming_each_ones_error():
    picker = create_picker(RR, POOL)
    picker.pool.record_scrape(picker.pool.endpoints[0], None, error="refused")
    picker.pool.record_scrape(picker.pool.endpoints[1], None, error="reset")
    err = refusal(picker, request())
    assert err.status == 503 and "vllm-0 (refused)" in err.message and "vllm-1 (reset)" in err.message


def test_every_queue_at_the_threshold_is_shed_with_429():
    picker = create_picker(PickerSettings(scorer="round-robin", shed_queue_threshold=2), "a=127.0.0.1:1,b=127.0.0.1:2")
    for ep in picker.pool.endpoints:
        picker.pool.record_scrape(ep, {"vllm:num_requests_waiting": 2, "vllm:num_requests_running": 4})
    err = refusal(picker, request())
    assert (err.status, err.code, err.scorer) == (429, "shed", "round-robin") and "waiting queue" in err.message
    picker.pool.record_scrape(picker.pool.endpoints[1], {"vllm:num_requests_waiting": 1})
    assert pick(picker, request()).name in ("a", "b")  # one endpoint under the threshold: no shedding


def test_stage_picks_name_a_prefiller_and_one_encoder_per_media_item():
    picker = create_picker(RR, "d0=127.0.0.1:8001", prefill="p0=127.0.0.1:1,p1=127.0.0.1:2",
                           encoders="e0=127.0.0.1:3,e1=127.0.0.1:4,e2=127.0.0.1:5")
    decisions = [pick(picker, request(images=2)) for _ in range(3)]
    assert [d.stages.prefiller.name for d in decisions] == ["p0", "p1", "p0"]
    assert [[e.name for e in d.stages.encoders] for d in decisions] == [["e0", "e1"], ["e1", "e2"], ["e2", "e0"]]
    set_headers, removed = decisions[0].headers()
    assert set_headers == {"x-gateway-destination-endpoint": "127.0.0.1:8001", "x-prefiller-host-port": "127.0.0.1:1",
                           "x-encoder-hosts-ports": "127.0.0.1:3,127.0.0.1:4"} and removed == []
    assert decisions[0].stages.prefill_reason.startswith("round-robin: ")
    text_only = pick(picker, request())
    assert text_only.stages.encoders == [] and text_only.headers()[1] == ["x-encoder-hosts-ports"]


def test_stage_force_headers_name_stages_and_unknown_names_are_a_503():
    picker = create_picker(RR, "d0=127.0.0.1:8001", prefill="p0=127.0.0.1:1,p1=127.0.0.1:2",
                           encoders="e0=127.0.0.1:3,e1=127.0.0.1:4")
    forced = pick(picker, request({"x-eppkit-force-prefiller": "p1", "x-eppkit-force-encoders": "127.0.0.1:4"}, images=1))
    assert (forced.stages.prefiller.name, [e.name for e in forced.stages.encoders]) == ("p1", ["e1"])
    assert forced.stages.prefill_reason == "forced (x-eppkit-force-prefiller)"
    err = refusal(picker, request({"x-eppkit-force-prefiller": "p9"}))
    assert err.status == 503 and "x-eppkit-force-prefiller" in err.message


def test_settings_refuse_an_unknown_scorer_or_parameter():
    with pytest.raises(ValueError, match="choose one of"):
        create_picker(PickerSettings(scorer="least-queue"))
    with pytest.raises(ValueError, match="valid: hashBlockSize"):
        create_picker(PickerSettings(scorer="prefix-cache-scorer", scorer_parameters={"blocks": 1}))
    with pytest.raises(ValueError, match="negative"):
        create_picker(PickerSettings(metrics_interval=-1))
