"""ext_proc through a real Envoy 1.40: the EPP (services/epp) picks over the ext_proc gRPC
protocol in FULL_DUPLEX_STREAMED, and the endpoint it names is the one that serves.

Trace of one request (span names as Envoy 1.40 and the services emit them):

    client:client.request
      envoy:ingress
        envoy:async envoy.service.ext_proc.v3.ExternalProcessor.Process egress
                                          <- Envoy's child span for the gRPC stream; its context is
                                             injected as `traceparent` in the gRPC initial metadata
          epp:epp.process
            epp:epp.pick                  epp.endpoint / epp.scorer / epp.reason
            epp:epp.inject
        envoy:router picked egress        <- override_host upstream to the picked host:port
          vllm:llm_request

Envoy ends its ext_proc span when it closes the gRPC stream after the last response, which
is just after the router has started the upstream request: the order that matters (the
decision exists before the request goes upstream) is checked on the EPP's own spans.
"""

import hashlib
import json
import socket
import threading
import time

import pytest
import requests
from eppkit.observability.contract import Client, Cluster, Envoy, Epp, Http, Service, Vllm
from eppkit.services.pod_headers import HEADER_BODY_SHA256
from eppkit.services.vllm.config import MockLatency

from eppkit import TraceCheck
from eppkit.core.polling import poll
from eppkit.topology import Topology, VllmSpec
from tests.support.reliability import assert_openai_error, wait_for_cluster_health
from tests.support.served import backend_spans, reports_cache_hits, serve_alternating

pytestmark = pytest.mark.e2e

MODEL = "mock-llm"
EXT_PROC_CALL = Envoy.EXT_PROC_CALL
PICKED_UPSTREAM = Envoy.router(Cluster.PICKED)
FALLBACK_UPSTREAM = Envoy.router(Cluster.POOL)
# A shared system prompt long enough to fill whole blocks of any backend's prefix cache (a real vLLM on CPU
# caches blocks of 128 tokens; the mock of 16).
SYSTEM = " ".join(["You are a meticulous assistant for an inference gateway test kit. Answer briefly, name the pod",
                   "you run on, keep every answer under twenty words and never invent facts you cannot check."] * 8)


def chat_body(content="Which pod am I on?", **extra):
    return {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": content}], **extra}


def ext_proc_topology(vllm=None, **options) -> Topology:
    options.setdefault("scorer", "round-robin")
    return Topology(mode="ext_proc", vllm=vllm or [VllmSpec("vllm-0"), VllmSpec("vllm-1")],
                    latency=MockLatency(time_to_first_token=30, inter_token_latency=5), options=options)


@pytest.fixture
def bed(eppkit_shared_testbed_factory):
    """One testbed for the tests that only send requests and read traces; a test that stops the EPP or counts
    Envoy's requests takes its own."""
    return eppkit_shared_testbed_factory(ext_proc_topology())


def served_trace(bed, result, *extra, upstream=PICKED_UPSTREAM):
    """The trace once it holds the kit's spans, the backend's (as far as it traces) and ``extra``."""
    return bed.jaeger.wait_for_trace(result.trace_id, [
        Client.REQUEST, Envoy.INGRESS, EXT_PROC_CALL,
        Epp.PROCESS, Epp.PICK, Epp.INJECT,
        upstream, *backend_spans(bed), *extra])


def rejected_trace(bed, result):
    return bed.jaeger.wait_for_trace(result.trace_id, [Client.REQUEST, Envoy.INGRESS,
                                                       Epp.PROCESS], quiet_s=1.0)


def test_the_endpoint_the_epp_picks_is_the_one_that_serves(bed):
    names, served = serve_alternating(bed, chat_body)

    for result, pod in served:
        check = TraceCheck(served_trace(bed, result))
        pick = check.one(Epp.PICK, Service.EPP)
        picked = pick.attributes[Epp.ENDPOINT]
        assert names[picked] == pod, f"EPP picked {picked} ({names.get(picked)}) but {pod} served"
        check.attribute(pick, Epp.ENDPOINT_NAME, pod)
        check.attribute(pick, Epp.SCORER, "round-robin")
        assert pick.attributes[Epp.REASON].startswith("round-robin turn")
        check.attribute(check.one(PICKED_UPSTREAM, Service.ENVOY), Envoy.UPSTREAM_ADDRESS, picked)
    assert {pod for _, pod in served} == {"vllm-0", "vllm-1"}


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_trace_is_complete_and_the_decision_ends_before_the_upstream_request_starts(bed):
    client = bed.client()
    result = client.chat(chat_body(stream=True))
    client.flush()
    assert result.status == 200, result.body

    check = TraceCheck(served_trace(bed, result, Vllm.PREFILL, Vllm.DECODE))
    check.present_once([Client.REQUEST, Envoy.INGRESS, EXT_PROC_CALL,
                        Epp.PROCESS, Epp.PICK, Epp.INJECT,
                        PICKED_UPSTREAM, Vllm.REQUEST])
    path = check.request_path("ext_proc")
    check.follows_contract()
    process, pick, inject = check.one(Epp.PROCESS), path.decision, check.one(Epp.INJECT)
    assert path.upstream.name == PICKED_UPSTREAM and path.backend.name == Vllm.REQUEST
    # Envoy opens a child span for the ext_proc gRPC stream and injects its context into the
    # stream's initial metadata; the EPP's span is a child of it.
    check.child_of(process, path.call)
    check.child_of(pick, process)
    check.child_of(inject, process)
    # The decision is made and delivered before the request goes upstream.
    check.in_order([pick, inject])
    check.before(process, path.upstream)
    check.within(process, path.call)
    check.within(path.backend, path.upstream, slack_ms=1.0)


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
@pytest.mark.parametrize(
    "headers, raw_body, status, error_type, code",
    [
        # a forced endpoint outside the pool: nobody can serve -> 503
        ({"x-eppkit-force-endpoint": "127.0.0.1:1"}, None, 503, "ServiceUnavailableError", "no_endpoint"),
        # a body that is not JSON -> 400
        ({}, b"{not json", 400, "BadRequestError", "invalid_json"),
        # JSON, but not an object -> 400
        ({}, b"[1, 2, 3]", 400, "BadRequestError", "invalid_json"),
    ],
)
def test_epp_verdicts_reach_the_client_as_openai_errors_and_nothing_goes_upstream(
        bed, headers, raw_body, status, error_type, code):
    client = bed.client()
    result = client.chat(chat_body(), headers=headers, raw_body=raw_body)
    client.flush()
    assert_openai_error(result.status, result.body, status, code=code, error_type=error_type)
    assert "x-inference-pod" not in result.headers

    check = TraceCheck(rejected_trace(bed, result))
    check.absent(Vllm.REQUEST, Service.VLLM)
    check.absent(PICKED_UPSTREAM, Service.ENVOY)
    check.attribute(check.one(Epp.PROCESS), Http.RESPONSE_STATUS_CODE, status)


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_every_endpoint_over_the_queue_threshold_sheds_with_429(eppkit_testbed_factory):
    # One backend that runs one request at a time; the second waits; the EPP sees waiting=1.
    bed = eppkit_testbed_factory(ext_proc_topology(
        vllm=[VllmSpec("vllm-0", extra_args=["--max-num-seqs", "1", "--time-to-first-token", "2500"])],
        shed_queue_threshold=1, metrics_interval=0.1))
    slow = []

    def fill():
        slow.append(requests.post(bed.envoy_url + "/v1/chat/completions", json=chat_body(), timeout=30))

    fillers = [threading.Thread(target=fill) for _ in range(2)]
    for t in fillers:
        t.start()
        time.sleep(0.2)
    client = bed.client()
    # the EPP sees the queue at its next scrape
    result = poll(lambda: client.chat(chat_body()), until=lambda r: r.status == 429, timeout_s=2.0, interval_s=0.1,
                  describe="a request shed with 429")
    client.flush()
    for t in fillers:
        t.join()
    assert_openai_error(result.status, result.body, 429, code="shed", error_type="RateLimitError")
    assert [r.status_code for r in slow] == [200, 200]
    check = TraceCheck(rejected_trace(bed, result))
    check.absent(Vllm.REQUEST, Service.VLLM)
    assert "waiting queue" in check.one(Epp.PICK).attributes[Epp.REASON]


def test_requests_without_a_body_are_picked_on_headers(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(ext_proc_topology())  # its own: it counts the picked cluster's requests
    resp = requests.get(bed.envoy_url + "/v1/models", timeout=10)
    assert resp.status_code == 200
    assert bed.served_pod(resp.headers) in {"vllm-0", "vllm-1"}
    stats = requests.get(bed.envoy_admin_url + "/stats?filter=cluster.picked.upstream_rq_total", timeout=5).text
    assert "cluster.picked.upstream_rq_total: 1" in stats


def test_prefix_cache_scorer_keeps_a_shared_prompt_on_one_endpoint(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(ext_proc_topology(scorer="prefix-cache-scorer"))
    client = bed.client()
    results = []
    for i in range(4):
        body = {"model": MODEL, "max_tokens": 2,
                "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"question {i}"}]}
        results.append(client.chat(body))
    client.flush()
    assert [r.status for r in results] == [200] * 4
    assert len({bed.served_pod(r.headers) for r in results}) == 1
    check = TraceCheck(served_trace(bed, results[-1]))
    assert check.one(Epp.PICK).attributes[Epp.REASON].startswith("prefix hit")
    if reports_cache_hits(bed):  # the backend's own prefix cache agrees: the later requests found it cached
        assert results[-1].body["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


def test_body_routing_in_front_picks_within_the_requested_model(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(ext_proc_topology(
        vllm=[VllmSpec("vllm-0", model="model-a"), VllmSpec("vllm-1", model="model-b")], body_routing=True))
    client = bed.client()
    pods = {m: {bed.served_pod(client.chat(dict(chat_body(), model=m)).headers) for _ in range(3)}
            for m in ("model-a", "model-b")}
    unknown = client.chat(dict(chat_body(), model="model-zzz"))
    client.flush()
    assert pods == {"model-a": {"vllm-0"}, "model-b": {"vllm-1"}}
    assert unknown.status == 404 and unknown.body["error"]["code"] == "model_not_found"


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_epp_down_fails_closed_by_default(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(ext_proc_topology())
    bed.services["epp"].process.stop()
    wait_for_cluster_health(bed, "epp", healthy=False)
    client = bed.client()
    result = client.chat(chat_body())
    client.flush()
    assert result.status == 500, result.body  # Envoy's status_on_error default
    trace = bed.jaeger.wait_for_trace(result.trace_id, [Envoy.INGRESS], quiet_s=1.0)
    check = TraceCheck(trace)
    check.absent(Vllm.REQUEST, Service.VLLM)
    check.absent(Epp.PROCESS, Service.EPP)


def test_epp_down_fails_closed_with_the_configured_status(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(ext_proc_topology(epp_disabled=True, epp_status_on_error=503))
    result = bed.client().chat(chat_body())
    assert result.status == 503


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_epp_down_fails_open_to_the_pool_when_failure_mode_allow(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(ext_proc_topology(failure_mode_allow=True))
    bed.services["epp"].process.stop()
    wait_for_cluster_health(bed, "epp", healthy=False)
    client = bed.client()
    results = [client.chat(chat_body(stream=s)) for s in (False, True)]
    client.flush()
    assert [r.status for r in results] == [200, 200], [r.body for r in results]
    assert {r.headers["x-inference-pod"] for r in results} == {"vllm-0", "vllm-1"}  # round-robin pool

    trace = bed.jaeger.wait_for_trace(results[0].trace_id, [Envoy.INGRESS, FALLBACK_UPSTREAM,
                                                            Vllm.REQUEST])
    check = TraceCheck(trace)
    check.absent(Epp.PROCESS)
    check.absent(PICKED_UPSTREAM)


def post_in_one_write(url: str, body: dict) -> int:
    """POST with headers and body in a single write, so Envoy reads both in one go; the status."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        status_line = sock.makefile("rb").readline().decode()
    return int(status_line.split()[1])


def test_without_health_checks_envoy_fails_closed_on_bodies_even_with_failure_mode_allow(eppkit_testbed_factory):
    """Envoy 1.40 behaviour, kept visible: in FULL_DUPLEX_STREAMED the ext_proc filter stops honouring
    failure_mode_allow once it has taken request body. A refused connection to the EPP is only
    learned after that, so a POST whose body came with its headers fails closed; a GET (no body)
    still fails open. (A client that sends the body later can win the race and fail open.)"""
    bed = eppkit_testbed_factory(ext_proc_topology(failure_mode_allow=True, epp_disabled=True,
                                            epp_health_check_interval_ms=0))
    post_status = post_in_one_write(bed.envoy_url, chat_body())
    get = requests.get(bed.envoy_url + "/v1/models", timeout=10)
    assert post_status == 500
    assert get.status_code == 200, get.text
    stats = requests.get(bed.envoy_admin_url + "/stats?filter=ext_proc|cluster.pool.upstream_rq_200", timeout=5).text
    assert "ext_proc.failure_mode_allowed: 1" in stats
    assert "cluster.pool.upstream_rq_200: 1" in stats  # served by a backend of the pool: fail-open


def test_epp_coming_back_is_used_again(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(ext_proc_topology(failure_mode_allow=True))
    epp = bed.services["epp"].process
    epp.stop()
    wait_for_cluster_health(bed, "epp", healthy=False)
    assert bed.client().chat(chat_body()).status == 200  # fail-open meanwhile
    epp.start()
    wait_for_cluster_health(bed, "epp", healthy=True)
    # The admin view turns healthy a moment before every worker thread does: allow a few seconds
    # for the EPP to be used again, but it must be (a forced pick is only honoured by the EPP).
    # A pod outside the pool is refused (503) only by the EPP; fail-open would serve it (200).
    client = bed.client()
    poll(lambda: client.chat(chat_body(), headers={"x-eppkit-force-endpoint": "no-such-pod"}).status,
         until=lambda status: status == 503, timeout_s=5, interval_s=0.2, describe="the EPP used again once healthy")
    result = client.chat(chat_body(), headers={"x-eppkit-force-endpoint": "vllm-1"})
    client.flush()
    assert (result.status, bed.served_pod(result.headers)) == (200, "vllm-1")
    served_trace(bed, result)


def test_large_bodies_are_buffered_and_passed_through_unchanged(bed):
    # ~1.5 MB prompt: Envoy streams it to the EPP in many chunks; the mock counts every token.
    words = 300_000
    prompt = "word " * words
    client = bed.client()
    result = client.chat({"model": MODEL, "max_tokens": 1, "prompt": prompt}, path="/v1/completions")
    client.flush()
    # The backend's context limit rejects it naming the whole prompt's size: the body arrived whole (the mock
    # counts its words, llm-d-inference-sim too, a real vLLM its characters).
    assert result.status == 400, result.body
    said = json.dumps(result.body)
    assert f"{words} in the messages" in said or f"contains {len(prompt)} characters" in said, said
    assert bed.served_pod(result.headers) in {"vllm-0", "vllm-1"}


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_response_path_through_the_epp_is_passed_through_unchanged(eppkit_testbed_factory):
    # epp_process_response keeps the gRPC stream open for the response (the multipart flow needs it).
    bed = eppkit_testbed_factory(ext_proc_topology(epp_process_response=True))
    client = bed.client()
    result = client.chat(chat_body(max_tokens=6))
    client.flush()
    assert result.status == 200, result.body
    assert result.body["usage"]["completion_tokens"] == 6 and result.text
    check = TraceCheck(served_trace(bed, result))
    # With the response path processed, Envoy keeps its ext_proc span open until the response ends.
    assert check.one(EXT_PROC_CALL).end_us >= check.one(Vllm.REQUEST).end_us


@pytest.mark.eppkit_needs_mock("reads the body's digest the mock reports")
@pytest.mark.parametrize("pieces", [1, 5], ids=["whole", "paced"])
def test_an_http2_body_with_trailers_reaches_the_backend_once_and_whole(bed, pieces):
    # h2c with a request trailer: the EPP's reply to the body's end carries the whole body (CONTINUE_AND_REPLACE).
    # Streamed back, it reached the backend twice: Envoy's router resends its retry copy on the trailers reply
    # (envoyproxy/envoy#45470; the mock then said "Invalid JSON ... Extra data").
    data = json.dumps(chat_body("Trailers follow this body.")).encode()
    client = bed.client()
    result = client.chat(None, raw_body=data, protocol="h2c", pieces=pieces, pause_s=0.02,
                         trailers={"x-client-checksum": hashlib.sha256(data).hexdigest()})
    client.flush()
    assert result.status == 200, (result.body, result.error)
    assert result.headers[HEADER_BODY_SHA256] == hashlib.sha256(data).hexdigest()
    served_trace(bed, result)


@pytest.mark.eppkit_needs_mock("reads the body's digest the mock reports")
@pytest.mark.parametrize("body_path", ["buffered", "none"])
def test_with_the_body_buffered_or_not_sent_the_pick_still_serves_the_whole_body_once(eppkit_testbed_factory,
                                                                                       body_path):
    # epp_request_body: Envoy sends the EPP the body whole (BUFFERED) or not at all (NONE); the decision answers
    # the body or the headers. h2c with a trailer and a paced body: the answer to the trailers is empty either way.
    bed = eppkit_testbed_factory(ext_proc_topology(epp_request_body=body_path))
    data = json.dumps(chat_body("Where does this body go?")).encode()
    client = bed.client()
    results = [client.chat(None, raw_body=data, protocol="h2c", pieces=3, pause_s=0.02,
                           trailers={"x-client-checksum": hashlib.sha256(data).hexdigest()}) for _ in range(2)]
    client.flush()
    assert [(r.status, r.headers[HEADER_BODY_SHA256]) for r in results] == [(200, hashlib.sha256(data).hexdigest())] * 2, [r.body for r in results]
    assert {bed.served_pod(r.headers) for r in results} == {"vllm-0", "vllm-1"}  # round robin: both picks served
    check = TraceCheck(served_trace(bed, results[0]))
    pick = check.one(Epp.PICK, service=Service.EPP)
    # The model is in the body: a buffered body gives it to the picker, no body leaves it unknown.
    assert pick.attributes.get("gen_ai.request.model") == (MODEL if body_path == "buffered" else None)
