"""sidecar through a real Envoy 1.40: the EPP asks the frontend sidecar (services/frontend,
`x-routing-request: true`) for each decision, then sets `x-gateway-destination-endpoint` and
`x-gateway-worker-id`; the worker the frontend chose is the one that serves.

Trace of one request:

    client:client.request
      envoy:ingress
        envoy:async envoy.service.ext_proc.v3.ExternalProcessor.Process egress
          epp:epp.process
            epp:epp.pick                  epp.scorer = frontend:kv, epp.worker_id
              frontend:frontend.route     frontend.worker_id, frontend.token_count
                frontend:frontend.tokenize
            epp:epp.inject
        envoy:router picked egress
          vllm:llm_request
"""

import pytest

from eppkit.services.vllm.config import MockLatency
from eppkit.observability.assertions import TraceCheck
from eppkit.topology import Topology, VllmSpec

pytestmark = pytest.mark.e2e

MODEL = "mock-llm"
EXT_PROC_CALL = "async envoy.service.ext_proc.v3.ExternalProcessor.Process egress"
PICKED_UPSTREAM = "router picked egress"
SYSTEM = ("You are a meticulous assistant for an inference gateway test kit. Answer briefly, name the "
          "pod you run on, keep every answer under twenty words and never invent facts you cannot check.")


def chat_body(content="Which pod am I on?", *, system=None, **extra):
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    return {"model": MODEL, "max_tokens": 4, "messages": messages, **extra}


def sidecar_topology(**options) -> Topology:
    options.setdefault("scorer", "kv-router-scorer")  # the frontend as Dynamo's: a KV-aware router
    return Topology(mode="sidecar", vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")],
                    latency=MockLatency(time_to_first_token=30, inter_token_latency=5), options=options)


@pytest.fixture
def bed(eppkit_testbed_factory):
    return eppkit_testbed_factory(sidecar_topology())


def served_trace(bed, result, *extra):
    return bed.jaeger.wait_for_trace(result.trace_id, [
        ("client", "client.request"), ("envoy", "ingress"), ("envoy", EXT_PROC_CALL),
        ("epp", "epp.process"), ("epp", "epp.pick"), ("frontend", "frontend.route"),
        ("frontend", "frontend.tokenize"), ("epp", "epp.inject"), ("envoy", PICKED_UPSTREAM),
        ("vllm", "llm_request"), *extra])


def test_the_worker_the_frontend_picks_is_the_one_that_serves(bed):
    names = {ep.address: ep.name for ep in bed.backends}
    client = bed.client()
    results = [client.chat(chat_body(f"question number {i} about something else entirely")) for i in range(4)]
    client.flush()
    assert [r.status for r in results] == [200] * 4, [r.body for r in results]

    for result in results:
        pod = result.headers["x-inference-pod"]
        check = TraceCheck(served_trace(bed, result))
        route, pick = check.one("frontend.route", "frontend"), check.one("epp.pick", "epp")
        assert names[route.attributes["frontend.endpoint"]] == pod
        check.attribute(route, "frontend.worker_id", pod)  # worker id = the mock's instance name
        check.attribute(pick, "epp.worker_id", pod)
        check.attribute(pick, "epp.endpoint.name", pod)
        check.attribute(pick, "epp.scorer", "frontend:kv-router-scorer")
        check.attribute(check.one(PICKED_UPSTREAM), "upstream_address", route.attributes["frontend.endpoint"])
        # The frontend's token count is the mock's prompt token count: one tokenizer.
        assert route.attributes["frontend.token_count"] == result.body["usage"]["prompt_tokens"]


def test_trace_is_complete_and_the_frontend_decides_before_the_upstream_request_starts(bed):
    client = bed.client()
    result = client.chat(chat_body())
    client.flush()
    assert result.status == 200, result.body

    check = TraceCheck(served_trace(bed, result))
    check.present_once([("envoy", EXT_PROC_CALL), ("epp", "epp.process"), ("epp", "epp.pick"),
                        ("frontend", "frontend.route"), ("frontend", "frontend.tokenize"),
                        ("epp", "epp.inject"), ("envoy", PICKED_UPSTREAM), ("vllm", "llm_request")])
    root, ingress, call = check.one("client.request"), check.one("ingress"), check.one(EXT_PROC_CALL)
    process, pick, inject = check.one("epp.process"), check.one("epp.pick"), check.one("epp.inject")
    route, tokenize = check.one("frontend.route"), check.one("frontend.tokenize")
    upstream = check.one(PICKED_UPSTREAM)
    check.single_root(root)
    check.child_of(call, ingress)
    check.child_of(process, call)
    check.child_of(pick, process)
    check.child_of(route, pick)  # the EPP propagated the context over the HTTP hop
    check.child_of(tokenize, route)
    check.child_of(inject, process)
    check.child_of(upstream, ingress)
    check.within(tokenize, route)
    check.within(route, pick)
    check.in_order([pick, inject])
    check.before(route, upstream)
    check.before(process, upstream)


def test_shared_prompts_stay_on_the_worker_that_holds_their_blocks(bed):
    client = bed.client()
    results = [client.chat(chat_body(f"question {i}", system=SYSTEM)) for i in range(4)]
    client.flush()
    assert [r.status for r in results] == [200] * 4
    assert len({r.headers["x-inference-pod"] for r in results}) == 1, [r.headers["x-inference-pod"] for r in results]
    route = TraceCheck(served_trace(bed, results[-1])).one("frontend.route")
    assert route.attributes["frontend.overlap_blocks"] > 0
    # The mock's own cache agrees with the router's guess.
    assert results[-1].body["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_frontend_down_is_a_503_and_nothing_goes_upstream(bed):
    bed.services["frontend"].process.stop()
    client = bed.client()
    result = client.chat(chat_body())
    client.flush()
    assert result.status == 503, result.body
    assert result.body["error"]["code"] == "frontend_unreachable"
    trace = bed.jaeger.wait_for_trace(result.trace_id, [("envoy", "ingress"), ("epp", "epp.pick")], quiet_s=1.0)
    check = TraceCheck(trace)
    check.absent("llm_request", "vllm")
    check.attribute(check.one("epp.process"), "http.response.status_code", 503)


def test_frontend_refusal_reaches_the_client(bed):
    client = bed.client()
    result = client.chat(chat_body(), raw_body=b"[1, 2]")
    client.flush()
    assert result.status == 400, result.body
    assert result.body["error"]["code"] == "invalid_json"
