"""A hostile client against Envoy, in every mode and in the multipart flow: raw HTTP/1.1 that Envoy
itself refuses, clients that stall, and internal routing headers a client has no business sending.

| case | expected, every mode (and ext_proc + multipart) |
|---|---|
| malformed chunk size, Content-Length + chunked, garbage request line, bad header name | 400 OpenAI JSON (Envoy) |
| a 70 KB header | 431 OpenAI JSON |
| ``Transfer-Encoding: gzip, chunked`` | 501 OpenAI JSON |
| a body that stops half-way, Content-Length larger than what is sent | 408 OpenAI JSON after ``request_timeout`` |
| headers that never finish | 408 OpenAI JSON after ``request_headers_timeout`` |
| good requests while three such clients stall | all 200, at their usual latency |
| a prefill longer than ``request_timeout`` | 200: the timeout covers the client's request, not the answer |
| ``x-gateway-destination-endpoint`` (and friends) naming Jaeger's query port | ignored: a backend answers |

The testbeds run with short client timeouts (``request_timeout_s`` 2 s, ``request_headers_timeout_s``
1 s) so the 408s arrive quickly; the defaults are documented in docs/reliability.md.
"""

from urllib.parse import urlparse

import pytest
import requests

from eppkit.core.polling import poll
from tests.support.hostile import CODEC_CASES, Stalled, body_stops_half_way, exchange, short_body, unfinished_headers
from tests.support.reliability import MODES, assert_kit_healthy, assert_openai_error, chat_body, topology

# Under pytest-xdist each (mode, flow)'s shared testbed is a group of its own.
pytestmark = [pytest.mark.e2e, pytest.mark.eppkit_share_per("mode", "flow")]

REQUEST_TIMEOUT_S = 2.0
HEADERS_TIMEOUT_S = 1.0
TIMEOUTS = {"request_timeout_s": REQUEST_TIMEOUT_S, "request_headers_timeout_s": HEADERS_TIMEOUT_S}
ANSWERED_AT_ONCE_US = 500_000  # half of Envoy's 1 s delayed close: an answer held until the close comes after it

# (mode, flow): every mode in the aggregated flow, and the one mode the multipart flow runs in
# (there Envoy also hands the response to the EPP, which is where codec errors used to vanish).
TARGETS = [(mode, "aggregated") for mode in MODES] + [("ext_proc", "multipart")]
IDS = [f"{m}-{f}" for m, f in TARGETS]


def bed_for(factory, mode: str, flow: str):
    return factory(topology(mode, flow=flow, **TIMEOUTS))


def assert_json_error(answer, status: int) -> None:
    assert answer.status == status, answer.describe()
    assert answer.headers.get("content-type", "").startswith("application/json"), answer.describe()
    assert_openai_error(answer.status, answer.json(), status)


@pytest.mark.parametrize("mode, flow", TARGETS, ids=IDS)
def test_envoys_own_refusals_are_openai_json(eppkit_shared_testbed_factory, mode, flow):
    bed = bed_for(eppkit_shared_testbed_factory, mode, flow)
    problems = []
    for case_id, pieces, status in CODEC_CASES:
        logged = len(bed.hops())
        answer = exchange(bed.listen_port, pieces(), read_timeout_s=5)
        try:
            assert_json_error(answer, status)
            # Answered at once, on Envoy's own clock (its record of the exchange: the response's end from the
            # request's first byte); before, ext_proc + multipart wrote nothing until Envoy closed the connection
            # 1 s later (its delayed close). The client's own elapsed time depends on the machine's load.
            record = poll(lambda: bed.hops()[logged] if len(bed.hops()) > logged else None, timeout_s=5,
                          interval_s=0.05, describe=f"Envoy's record of {case_id}")
            assert record.code == status, record.describe()
            assert record["response_end_us"] < ANSWERED_AT_ONCE_US, record.describe()
        except AssertionError as exc:
            problems.append(f"{case_id}: {exc}")
    assert not problems, f"{mode}/{flow}:\n" + "\n".join(problems)
    assert_kit_healthy(bed)
    good = bed.client().chat(chat_body())
    assert good.status == 200, good.body


# Alone: beside other tests at load 12-17 a pick once took over the callout's 1 s timeout (a 502 in
# docker lua-callout), and good requests must finish within 1.5 s.
@pytest.mark.eppkit_alone("good requests within 1.5 s, 408s within their timeouts")
@pytest.mark.parametrize("mode, flow", TARGETS, ids=IDS)
def test_slow_and_short_clients_get_a_408_and_good_requests_are_unaffected(eppkit_shared_testbed_factory, mode, flow):
    bed = bed_for(eppkit_shared_testbed_factory, mode, flow)
    read_timeout = REQUEST_TIMEOUT_S + 8
    stalled = {
        "body-stops-half-way": (Stalled(bed.listen_port, body_stops_half_way(), read_timeout), REQUEST_TIMEOUT_S),
        "short-body": (Stalled(bed.listen_port, short_body(), read_timeout), REQUEST_TIMEOUT_S),
        "unfinished-headers": (Stalled(bed.listen_port, unfinished_headers(), read_timeout), HEADERS_TIMEOUT_S),
    }
    for thread, _ in stalled.values():
        thread.start()
    client = bed.client()
    good = [client.chat(chat_body(f"good request {i}")) for i in range(10)]
    for thread, _ in stalled.values():
        thread.join(read_timeout + 5)
    client.flush()
    assert [r.status for r in good] == [200] * 10, [r.body for r in good if r.status != 200]
    slowest = max(r.finished_s - r.started_s for r in good)
    assert slowest < 1.5, f"a good request took {slowest:.2f} s while slow clients stalled"
    problems = []
    for case_id, (thread, timeout_s) in stalled.items():
        answer = thread.answer
        try:
            assert answer is not None, "the stalled client never finished"
            assert_json_error(answer, 408)
            assert timeout_s * 0.9 <= answer.elapsed_s <= timeout_s + 3, answer.describe()
        except AssertionError as exc:
            problems.append(f"{case_id}: {exc}")
    assert not problems, f"{mode}/{flow}:\n" + "\n".join(problems)
    assert_kit_healthy(bed)


@pytest.mark.eppkit_needs_mock("steers the mock with x-mock-* headers")
@pytest.mark.parametrize("mode, flow", TARGETS, ids=IDS)
def test_a_prefill_longer_than_the_request_timeout_is_served(eppkit_shared_testbed_factory, mode, flow):
    bed = bed_for(eppkit_shared_testbed_factory, mode, flow)
    client = bed.client()
    for stream in (False, True):
        result = client.chat(chat_body(stream=stream), headers={"x-mock-ttft-ms": str(REQUEST_TIMEOUT_S * 1000 + 1000)},
                             timeout_s=30)
        assert result.status == 200 and result.text, (stream, result.status, result.body, result.error)
        assert result.finished_s - result.started_s >= REQUEST_TIMEOUT_S + 1
        assert not any("error" in e for e in result.events), result.events


@pytest.mark.parametrize("mode", MODES)
def test_internal_routing_headers_from_a_client_steer_nothing(eppkit_shared_testbed_factory, mode):
    bed = bed_for(eppkit_shared_testbed_factory, mode, "aggregated")
    jaeger = urlparse(bed.jaeger_api_url).netloc  # a real service on this host that is not a backend
    hostile = {
        "x-gateway-destination-endpoint": jaeger,
        "x-gateway-destination-endpoint-served": jaeger,
        "x-envoy-original-dst-host": jaeger,
        "x-gateway-worker-id": "attacker",
        "x-prefiller-host-port": f"127.0.0.1:{bed.admin_port}/quitquitquit?x=",
        "x-encoder-hosts-ports": jaeger,
        "x-routing-request": "true",
    }
    backends = {ep.name for ep in bed.backends}
    # GET: no picker decides a bodyless request in the callout modes, so only the route is left.
    models = requests.get(bed.envoy_url + "/v1/models", headers=hostile, timeout=10)
    assert models.status_code == 200 and models.headers.get("x-inference-pod") in backends, (
        models.status_code, models.headers, models.text[:300])
    assert [m["id"] for m in models.json()["data"]] == ["mock-llm"]
    client = bed.client()
    for _ in range(2):
        result = client.chat(chat_body(), headers=hostile)
        assert result.status == 200 and result.headers.get("x-inference-pod") in backends, (result.status, result.body)
    client.flush()
    assert_kit_healthy(bed)


def test_multipart_body_over_the_backends_limit_is_a_413(eppkit_shared_testbed_factory):
    """The documented 413 (docs/mocks.md), not a 400 about a part's Content-Length."""
    bed = bed_for(eppkit_shared_testbed_factory, "ext_proc", "multipart")
    words = 9 * (1 << 20) // 2
    result = bed.client().chat(chat_body("w " * words, stream=True), timeout_s=60)
    assert result.error is None, result.error
    assert_openai_error(result.status, result.body, 413)
    assert result.headers.get("content-type", "").startswith("application/json"), result.headers
    assert_kit_healthy(bed)
    good = bed.client().chat(chat_body())
    assert good.status == 200, good.body
