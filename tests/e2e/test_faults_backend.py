"""Backend faults in every mode: a backend dies or drops the connection mid-stream, prefill or
encoding fails, no endpoint is left, the backend is saturated.

| fault | every mode |
|---|---|
| backend killed mid-stream | the client's stream ends without ``[DONE]`` (closed, not hung); Envoy's upstream span has error=true and a response flag; Envoy and the kit stay up; the next request is served (ext_proc, sidecar: the picker leaves the dead one out; direct and the callouts keep routing to it: a clean 503 for those until it is back) |
| backend drops the connection mid-stream | the same, and the mock's own ``llm_request`` span ends with ERROR |
| prefill fails (P/D) | 502 naming the prefiller; ``pd.prefill`` ERROR, no decode |
| encoder fails (E/P/D) | 502 naming the media item; no prefill (direct: test_flows_disagg.py) |
| no endpoint left | 503, OpenAI-style (direct: test_envoy_local_replies.py) |
| backend saturated | 429 ``queue_full`` from the mock, passed through unchanged |
"""

import threading
import time

import pytest
import requests
from eppkit.observability.contract import Client, Encoder, Envoy, Http, Mock, Pd, Service, Vllm

from eppkit import TraceCheck
from eppkit.core.polling import poll
from tests.support.contract import cases
from tests.support.reliability import (
    MODES,
    PICKER_MODES,
    TRAITS,
    SpanSource,
    Stream,
    assert_kit_healthy,
    assert_openai_error,
    chat_body,
    counter,
    kill,
    restart,
    topology,
)

pytestmark = pytest.mark.e2e

LONG_STREAM = {"max_tokens": 200, "stream": True}
SLOW_TOKENS = {"x-mock-itl-ms": "30"}  # 200 tokens take 6 s: the fault lands mid-stream


@pytest.fixture
def spans(eppkit_testbed_factory):
    made = []

    def make(bed):
        source = SpanSource(bed.otlp_endpoint, bed.topology.mode, bed.topology.flow)
        made.append(source)
        return source

    yield make
    for source in made:
        source.close()


def _served_by_the_survivor_or_refused_cleanly(bed, survivor: str, n: int = 4) -> list[int]:
    statuses = []
    client = bed.client()
    for _ in range(n):
        r = client.chat(chat_body())
        statuses.append(r.status)
        if r.status == 200:
            assert r.headers["x-inference-pod"] == survivor
        else:  # routed to the dead backend: Envoy's own reply, as JSON
            assert_openai_error(r.status, r.body, 503, mentions="upstream")
    return statuses


def _broken_stream_trace(bed, outcome, traits, *extra):
    trace = bed.jaeger.wait_for_trace(outcome.trace_id, [Client.REQUEST, Envoy.INGRESS,
                                                         traits.upstream, *extra], quiet_s=1.0)
    check = TraceCheck(trace)
    upstream = check.one(traits.upstream, Service.ENVOY)
    assert upstream.error, f"Envoy's upstream span should end with error: {upstream.attributes}"
    assert upstream.attributes.get(Envoy.RESPONSE_FLAGS) not in (None, "-"), upstream.attributes
    assert check.one(Client.REQUEST).error
    return check


@pytest.mark.parametrize("mode", cases(MODES, "ext_proc", why="a backend killed mid-stream"))
def test_backend_killed_mid_stream_ends_the_stream_and_the_gateway_keeps_serving(eppkit_testbed_factory, spans, mode):
    traits = TRAITS[mode]
    bed = eppkit_testbed_factory(topology(mode))
    stream = Stream(bed, spans(bed), chat_body(**LONG_STREAM), headers=SLOW_TOKENS)
    first = stream.first_data()
    assert first.status == 200, first.body
    victim = first.headers["x-inference-pod"]
    survivor = ({"vllm-0", "vllm-1"} - {victim}).pop()
    kill(bed, victim)
    t0 = time.monotonic()
    outcome = stream.read_to_end()

    assert time.monotonic() - t0 < 5, "the client was left hanging"
    assert not outcome.done, "a killed backend cannot have finished the stream"
    assert outcome.error, outcome
    _broken_stream_trace(bed, outcome, traits)  # the mock's own span died with it (SIGKILL)
    assert_kit_healthy(bed, except_=(victim,))

    if traits.health_aware:  # the picker's scrape is refused: the dead backend leaves the pool
        time.sleep(0.6)
        assert _served_by_the_survivor_or_refused_cleanly(bed, survivor) == [200] * 4
    else:
        assert 200 in _served_by_the_survivor_or_refused_cleanly(bed, survivor)
    restart(bed, victim)
    time.sleep(0.6)
    client = bed.client()
    results = [client.chat(chat_body()) for _ in range(4)]
    assert [r.status for r in results] == [200] * 4, [r.body for r in results]
    assert {r.headers["x-inference-pod"] for r in results} == {"vllm-0", "vllm-1"}, "the restarted backend serves again"


@pytest.mark.eppkit_needs_mock("steers the mock with x-mock-* headers; reads the mock's vllm spans")
@pytest.mark.parametrize("mode", MODES)
def test_backend_dropping_the_connection_mid_stream_ends_every_span_with_an_error(eppkit_testbed_factory, spans, mode):
    traits = TRAITS[mode]
    bed = eppkit_testbed_factory(topology(mode))
    stream = Stream(bed, spans(bed), chat_body(**LONG_STREAM),
                    headers={**SLOW_TOKENS, "x-mock-failure": "disconnect", "x-mock-failure-after-tokens": "3"})
    assert stream.first_data().status == 200
    outcome = stream.read_to_end()

    assert not outcome.done and outcome.error, outcome
    # vLLM's first chat chunk carries only the role; the tokens are the chunks with content
    tokens = [e for e in outcome.events if any((c.get("delta") or {}).get("content") for c in e.get("choices", []))]
    assert len(tokens) == 3, f"expected the 3 tokens written before the drop, got {len(tokens)}"
    check = _broken_stream_trace(bed, outcome, traits, Vllm.REQUEST)
    llm = check.one(Vllm.REQUEST, Service.VLLM)
    assert llm.error and llm.attributes.get(Mock.FAILURE) == "disconnect", llm.attributes
    assert_kit_healthy(bed)
    assert bed.client().chat(chat_body()).status == 200


@pytest.mark.eppkit_needs_mock("steers the mock with x-mock-* headers; reads the mock's vllm spans")
@pytest.mark.parametrize("mode", MODES)
def test_prefill_failure_is_a_502_naming_the_prefiller_and_nothing_is_decoded(eppkit_testbed_factory, mode):
    bed = eppkit_testbed_factory(topology(mode, flow="pd", vllm=("vllm-0",)))
    prefiller = next(h for name, h in bed.services.items() if name.startswith("vllm-p"))
    client = bed.client()
    for stream in (False, True):  # the status line is not out yet when prefill fails: a 502 either way
        result = client.chat(chat_body(stream=stream), headers={"x-mock-prefill-failure": "500"})
        client.flush()
        assert_openai_error(result.status, result.body, 502, mentions="prefill")
        assert prefiller.url.removeprefix("http://") in result.body["error"]["message"]
        check = TraceCheck(bed.jaeger.wait_for_trace(result.trace_id, [
            Pd.REQUEST, Pd.PREFILL, Vllm.REQUEST], quiet_s=1.0))
        assert check.one(Pd.PREFILL).error and check.one(Pd.REQUEST).error
        assert check.one(Vllm.REQUEST, Service.VLLM).attributes.get(Mock.FAILURE) == "500"
        check.absent(Pd.DECODE)
        check.absent(Vllm.DECODE)
    assert_kit_healthy(bed)
    assert client.chat(chat_body(stream=True)).status == 200


@pytest.mark.eppkit_needs_mock("steers the mock with x-mock-* headers; reads the mock's vllm spans")
@pytest.mark.parametrize("mode", PICKER_MODES)
def test_encoder_failure_is_a_502_naming_the_media_item(eppkit_testbed_factory, mode):
    bed = eppkit_testbed_factory(topology(mode, flow="epd", vllm=("vllm-0",)))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "aW1n" * 40}}
    body = chat_body([{"type": "text", "text": "What is in this picture?"}, image])
    client = bed.client()
    result = client.chat(body, headers={"x-mock-encoder-failure": "500"})
    client.flush()

    assert_openai_error(result.status, result.body, 502, mentions="media item 0")
    assert "image_url" in result.body["error"]["message"]
    check = TraceCheck(bed.jaeger.wait_for_trace(result.trace_id, [Pd.ENCODE,
                                                                   Encoder.ENCODE], quiet_s=1.0))
    assert check.one(Pd.ENCODE).error
    encode = check.one(Encoder.ENCODE)
    assert encode.error and encode.attributes.get(Mock.FAILURE) == "500", encode.attributes
    check.absent(Vllm.PREFILL)
    check.absent(Pd.PREFILL)
    assert_kit_healthy(bed)
    assert client.chat(body).status == 200


@pytest.mark.parametrize("mode", PICKER_MODES)
def test_no_endpoint_left_is_a_503(eppkit_testbed_factory, mode):
    traits = TRAITS[mode]
    bed = eppkit_testbed_factory(topology(mode))
    for name in ("vllm-0", "vllm-1"):
        kill(bed, name)
    time.sleep(0.6)  # the picker's next scrapes are refused
    client = bed.client()
    results = [client.chat(chat_body()) for _ in range(2)]
    client.flush()

    for r in results:
        assert_openai_error(r.status, r.body, 503)
    # Every picker scrapes /metrics: it says so itself, and nothing goes upstream.
    assert traits.health_aware
    assert results[0].body["error"]["code"] == "no_endpoint", results[0].body
    check = TraceCheck(bed.jaeger.wait_for_trace(results[0].trace_id, [traits.picker_span], quiet_s=1.0))
    check.attribute(check.one(traits.picker_span, traits.picker), Http.RESPONSE_STATUS_CODE, 503)
    check.absent(traits.upstream)
    assert_kit_healthy(bed, except_=("vllm-0", "vllm-1"))


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans; starts the mock with its own flags")
@pytest.mark.parametrize("mode", MODES)
def test_a_saturated_backend_answers_429_through_the_gateway(eppkit_testbed_factory, mode):
    # One backend, one running slot, one waiting place: the third request at once is refused.
    bed = eppkit_testbed_factory(topology(mode, vllm=("vllm-0",), ttft_ms=1500,
                                   vllm_args=("--max-num-seqs", "1", "--max-waiting-queue-length", "1")))
    backend = bed.services["vllm-0"].url
    fillers = []

    def fill():
        fillers.append(requests.post(bed.envoy_url + "/v1/chat/completions", json=chat_body(), timeout=30).status_code)

    threads = [threading.Thread(target=fill) for _ in range(2)]
    for t in threads:
        t.start()
    poll(lambda: counter(backend, "vllm:num_requests_running") == 1
         and counter(backend, "vllm:num_requests_waiting") == 1, timeout_s=10, describe="one request running and one waiting")
    client = bed.client()
    result = client.chat(chat_body())
    client.flush()
    for t in threads:
        t.join()

    assert_openai_error(result.status, result.body, 429, code="queue_full")
    assert result.headers["x-inference-pod"] == "vllm-0", "the backend's own answer, passed through"
    assert fillers == [200, 200], "the requests already admitted are served"
    check = TraceCheck(bed.jaeger.wait_for_trace(result.trace_id, [Vllm.REQUEST, Vllm.QUEUE]))
    assert check.one(Vllm.REQUEST).error and check.one(Vllm.QUEUE).error
    check.attribute(check.one(Vllm.REQUEST), Http.RESPONSE_STATUS_CODE, 429)
    assert_kit_healthy(bed)
