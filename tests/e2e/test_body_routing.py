"""Body-based model routing (envoy/_body_router.j2: json_to_metadata, rbac, metadata routes) in front of
lua-callout, through a real Envoy.

Two pools serve two models: vllm-0 and vllm-1 serve "m-a", vllm-2 serves "m-b". Envoy reads the
body's top-level "model" into dynamic metadata, the routes choose the pool by it, and the callout
(told the model in x-gateway-model-name) picks only among that model's endpoints. Bad or unknown
models get a 4xx before the callout is asked.
"""

import json

import pytest
import requests
from eppkit.observability.contract import Callout, Client, Cluster, Envoy, GenAi, Vllm
from eppkit.services.vllm.config import MockLatency

from eppkit import TraceCheck
from eppkit.topology import Topology, VllmSpec

pytestmark = pytest.mark.e2e

POOLS = {"m-a": {"vllm-0", "vllm-1"}, "m-b": {"vllm-2"}}


def body_routing_topology(**options) -> Topology:
    return Topology(mode="lua-callout",
                    vllm=[VllmSpec("vllm-0", model="m-a"), VllmSpec("vllm-1", model="m-a"), VllmSpec("vllm-2", model="m-b")],
                    latency=MockLatency(time_to_first_token=20, inter_token_latency=5),
                    options={"body_routing": True, **options})


@pytest.fixture
def bed(eppkit_shared_testbed_factory):
    """One testbed for the tests that only send requests (the least-queue scorer rotates its ties per pool, so two
    turns of a pool with equal loads reach both its pods whatever came before)."""
    return eppkit_shared_testbed_factory(body_routing_topology())


def chat(model, **extra):
    return {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hello"}], **extra}


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_each_model_is_served_by_its_own_pool(bed):
    client = bed.client()
    results = [(model, client.chat(chat(model))) for model in ("m-a", "m-b", "m-a", "m-b", "m-a")]
    client.flush()
    for model, result in results:
        assert result.status == 200, result.body
        assert result.headers["x-inference-pod"] in POOLS[model], f"{model} served by {result.headers['x-inference-pod']}"
        assert result.body["model"] == model
    assert {r.headers["x-inference-pod"] for m, r in results if m == "m-a"} == POOLS["m-a"]

    model, last = results[-2]  # an m-b request: its trace shows the model reaching the picker and the pool's route
    trace = bed.jaeger.wait_for_trace(last.trace_id, [Callout.PICK, Envoy.router(Cluster.PICKED),
                                                      Vllm.REQUEST])
    check = TraceCheck(trace)
    check.attribute(check.one(Callout.PICK), GenAi.REQUEST_MODEL, "m-b")
    check.attribute(check.one(Callout.PICK), Callout.ENDPOINT_NAME, "vllm-2")
    check.before(check.one(Callout.PICK), check.one(Envoy.router(Cluster.PICKED)))


# How the body can look: the router must find the top-level "model" and nothing else.
READABLE_BODIES = [
    # "model" after a large message list, with a decoy "model" inside a message
    ('{"messages": [{"role": "user", "content": "say \\"model\\": \\"m-a\\"", "model": "m-a"}], '
     '"max_tokens": 2, "model": "m-b"}', "m-b"),
    # decoys inside nested arrays and strings holding braces and brackets
    ('{"stop": ["}", "]", "{\\"model\\":\\"m-a\\"}"], "tools": [{"model": {"model": "m-a"}}], "model": "m-b", '
     '"max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}', "m-b"),
    # an escaped model name and whitespace everywhere
    ('\n { "model" :\t"m\\u002da" ,\r\n "max_tokens" : 2 , "messages" : [ {"role":"user","content":"x"} ] } ', "m-a"),
    # strings ending in escaped backslashes, and an escaped quote after escaped backslashes
    ('{"stop": ["\\\\", "x\\\\\\"y\\\\"], "model": "m-b", "max_tokens": 2, '
     '"messages": [{"role": "user", "content": "line\\nline\\t\\"q\\""}]}', "m-b"),
    # numbers, literals and null before the model
    ('{"temperature": 0.5e-1, "stream": false, "seed": null, "n": 1, "max_tokens": 2, "model": "m-b", '
     '"messages": [{"role": "user", "content": "x"}]}', "m-b"),
]


def test_router_reads_the_top_level_model_however_the_body_is_written(bed):
    client = bed.client()
    for raw, model in READABLE_BODIES:
        json.loads(raw)  # every case is valid JSON
        result = client.chat({}, raw_body=raw.encode())
        assert result.status == 200, (raw, result.body)
        assert result.headers["x-inference-pod"] in POOLS[model], (raw, result.headers["x-inference-pod"])


REJECTED_BODIES = [
    # (raw body, status, code)
    ('{"model": "m-z", "messages": []}', 404, "model_not_found"),  # no pool serves it
    ('{"messages": [{"role": "user", "content": "x", "model": "m-a"}]}', 400, "missing_model"),  # only nested
    ('{"model": 7, "messages": []}', 400, "invalid_model"),
    ('{"model": "", "messages": []}', 400, "invalid_model"),
    ('{"model": "m-a\\n", "messages": []}', 400, "invalid_model"),  # would become a header value
    ('{"model": "m-a", "messages": [', 400, "invalid_json"),  # truncated
    ("not json at all", 400, "invalid_json"),
    # json_to_metadata finds no top-level "model" in these (docs/body-routing.md): missing, not invalid_json
    ('["m-a"]', 400, "missing_model"),
    ("", 400, "missing_model"),
    ('{"model": null, "messages": []}', 400, "missing_model"),
]


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_wrong_or_missing_model_is_a_clear_4xx_and_nothing_is_picked(bed):
    client = bed.client()
    results = [(raw, status, code, client.chat({}, raw_body=raw.encode())) for raw, status, code in REJECTED_BODIES]
    client.flush()
    for raw, status, code, result in results:
        assert (result.status, result.body["error"]["code"]) == (status, code), (raw, result.body)
        assert result.body["error"]["param"] == "model"
        assert "x-inference-pod" not in result.headers
    unknown = results[0][3]
    assert unknown.body["error"]["message"] == 'model "m-z" is not served here; served models: m-a, m-b'
    assert unknown.body["error"]["type"] == "NotFoundError"
    trace = bed.jaeger.wait_for_trace(unknown.trace_id, [Client.REQUEST, Envoy.INGRESS], quiet_s=1.0)
    check = TraceCheck(trace)
    check.absent(Callout.PICK)
    check.absent(Vllm.REQUEST)


def test_a_client_sent_model_header_does_not_choose_the_pool(bed):
    # A GET has no body to read: the router drops the client's header, the request takes the first pool.
    resp = requests.get(bed.envoy_url + "/v1/models", headers={"x-gateway-model-name": "m-b"}, timeout=10)
    assert resp.status_code == 200
    assert resp.headers["x-inference-pod"] in POOLS["m-a"]
    # A POST is routed by its body, whatever header it carries.
    result = bed.client().chat(chat("m-a"), headers={"x-gateway-model-name": "m-b"})
    assert result.status == 200 and result.headers["x-inference-pod"] in POOLS["m-a"]


def test_fail_open_keeps_the_model_pool(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(body_routing_topology(failure_mode_allow=True))
    bed.services["callout"].process.stop()
    client = bed.client()
    results = [client.chat(chat("m-b")) for _ in range(2)]
    assert [(r.status, r.headers.get("x-inference-pod")) for r in results] == [(200, "vllm-2")] * 2
    assert results[0].headers["x-eppkit-callout"].startswith("fail-open")
