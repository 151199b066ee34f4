"""sidecar through a real Envoy 1.40: the EPP asks the frontend sidecar (services/frontend,
`x-routing-request: true`) for each decision, then sets `x-gateway-destination-endpoint` and
`x-gateway-worker-id`; the worker the frontend chose is the one that serves.

Trace of one request:

    client:client.request
      envoy:ingress
        envoy:async envoy.service.ext_proc.v3.ExternalProcessor.Process egress
          epp:epp.process
            epp:epp.pick                  epp.scorer = frontend:kv-router-scorer, epp.worker_id
              frontend:frontend.route     frontend.worker_id, frontend.token_count
                frontend:frontend.tokenize
            epp:epp.inject
        envoy:router picked egress
          vllm:llm_request
"""

import pytest
from eppkit.observability.contract import Client, Cluster, Envoy, Epp, Frontend, Http, Service, Vllm
from eppkit.services.vllm.config import MockLatency

from eppkit import TraceCheck
from eppkit.topology import Topology, VllmSpec
from tests.support.reliability import assert_openai_error
from tests.support.served import backend_spans, reports_cache_hits

pytestmark = pytest.mark.e2e

MODEL = "mock-llm"
EXT_PROC_CALL = Envoy.EXT_PROC_CALL
PICKED_UPSTREAM = Envoy.router(Cluster.PICKED)
# A shared system prompt long enough to fill whole blocks of any backend's prefix cache (a real vLLM on CPU
# caches blocks of 128 tokens; the mock of 16).
SYSTEM = " ".join(["You are a meticulous assistant for an inference gateway test kit. Answer briefly, name the pod",
                   "you run on, keep every answer under twenty words and never invent facts you cannot check."] * 8)


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
    """The trace once it holds the kit's spans, the backend's (as far as it traces) and ``extra``."""
    return bed.jaeger.wait_for_trace(result.trace_id, [
        Client.REQUEST, Envoy.INGRESS, EXT_PROC_CALL,
        Epp.PROCESS, Epp.PICK, Frontend.ROUTE,
        Frontend.TOKENIZE, Epp.INJECT, PICKED_UPSTREAM,
        *backend_spans(bed), *extra])


def test_the_worker_the_frontend_picks_is_the_one_that_serves(bed):
    names = {ep.address: ep.name for ep in bed.backends}
    client = bed.client()
    results = [client.chat(chat_body(f"question number {i} about something else entirely")) for i in range(4)]
    client.flush()
    assert [r.status for r in results] == [200] * 4, [r.body for r in results]

    for result in results:
        pod = bed.served_pod(result.headers)
        check = TraceCheck(served_trace(bed, result))
        route, pick = check.one(Frontend.ROUTE, Service.FRONTEND), check.one(Epp.PICK, Service.EPP)
        assert names[route.attributes[Frontend.ENDPOINT]] == pod
        check.attribute(route, Frontend.WORKER_ID, pod)  # worker id = the mock's instance name
        check.attribute(pick, Epp.WORKER_ID, pod)
        check.attribute(pick, Epp.ENDPOINT_NAME, pod)
        check.attribute(pick, Epp.SCORER, "frontend:kv-router-scorer")
        check.attribute(check.one(PICKED_UPSTREAM), Envoy.UPSTREAM_ADDRESS, route.attributes[Frontend.ENDPOINT])
        if not bed.topology.backend.external:  # the frontend's tokenizer is the mock's: one count
            assert route.attributes[Frontend.TOKEN_COUNT] == result.body["usage"]["prompt_tokens"]


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_trace_is_complete_and_the_frontend_decides_before_the_upstream_request_starts(bed):
    client = bed.client()
    result = client.chat(chat_body())
    client.flush()
    assert result.status == 200, result.body

    check = TraceCheck(served_trace(bed, result))
    check.present_once([EXT_PROC_CALL, Epp.PROCESS, Epp.PICK,
                        Frontend.ROUTE, Frontend.TOKENIZE,
                        Epp.INJECT, PICKED_UPSTREAM, Vllm.REQUEST])
    path = check.request_path("sidecar")
    check.follows_contract()
    process, pick, inject = check.one(Epp.PROCESS), check.one(Epp.PICK), check.one(Epp.INJECT)
    route, tokenize, upstream = path.decision, check.one(Frontend.TOKENIZE), path.upstream
    assert upstream.name == PICKED_UPSTREAM
    check.child_of(process, path.call)
    check.child_of(pick, process)
    check.child_of(route, pick)  # the EPP propagated the context over the HTTP hop
    check.child_of(tokenize, route)
    check.child_of(inject, process)
    check.within(tokenize, route)
    check.within(route, pick)
    check.in_order([pick, inject])
    check.before(process, upstream)


def test_shared_prompts_stay_on_the_worker_that_holds_their_blocks(bed):
    client = bed.client()
    results = [client.chat(chat_body(f"question {i}", system=SYSTEM)) for i in range(4)]
    client.flush()
    assert [r.status for r in results] == [200] * 4
    pods = [bed.served_pod(r.headers) for r in results]
    assert len(set(pods)) == 1, pods
    route = TraceCheck(served_trace(bed, results[-1])).one(Frontend.ROUTE)
    assert route.attributes[Frontend.OVERLAP_BLOCKS] > 0
    if reports_cache_hits(bed):  # the backend's own prefix cache agrees: the later requests found it cached
        assert results[-1].body["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_frontend_down_is_a_503_and_nothing_goes_upstream(bed):
    bed.services["frontend"].process.stop()
    client = bed.client()
    result = client.chat(chat_body())
    client.flush()
    assert_openai_error(result.status, result.body, 503, code="frontend_unreachable")
    trace = bed.jaeger.wait_for_trace(result.trace_id, [Envoy.INGRESS, Epp.PICK], quiet_s=1.0)
    check = TraceCheck(trace)
    check.absent(Vllm.REQUEST, Service.VLLM)
    check.attribute(check.one(Epp.PROCESS), Http.RESPONSE_STATUS_CODE, 503)


def test_frontend_refusal_reaches_the_client(bed):
    client = bed.client()
    result = client.chat(chat_body(), raw_body=b"[1, 2]")
    client.flush()
    assert_openai_error(result.status, result.body, 400, code="invalid_json")
