"""The picker is slow, or hangs: what each mode's timeouts really do (Envoy 1.40).

| mode | fault | what happens |
|---|---|---|
| ext_proc, sidecar | EPP slower than ``message_timeout`` | nothing: Envoy 1.40 arms no message timer in FULL_DUPLEX_STREAMED (``ProcessorState::onStartProcessorCall``); the request waits for the EPP and is served |
| ext_proc, sidecar | EPP hung, ``epp_keepalive_ms`` set | HTTP/2 PINGs go unanswered, Envoy drops the connection: 500, fail-closed even with ``failure_mode_allow`` (the body was already handed over) |
| ext_proc, sidecar | EPP hung, no keepalive (the default) | only ``stream_idle_timeout`` (300 s in the kit) ends it, with a 504: not run here, see docs/reliability.md |
| sidecar | frontend hung | the EPP's ``--frontend-timeout`` ends it: 503 ``frontend_unreachable`` |
| lua-callout, dynmod-callout | callout slower than ``callout_timeout_ms`` | 502 ``callout_unavailable``, or the round-robin pool with ``failure_mode_allow`` |

A hung component is stopped (SIGSTOP, or ``docker pause``): its port still accepts
connections and nothing answers, as with a wedged process. (lua-callout, fail-closed, slow
callout is test_mode_callouts.py::test_a_callout_slower_than_its_timeout_counts_as_down.)
"""

import time

import pytest
from eppkit.observability.contract import Callout, Envoy, Epp, Http, Service, Vllm

from eppkit import TraceCheck
from tests.support.contract import cases
from tests.support.reliability import (
    TRAITS,
    assert_kit_healthy,
    assert_openai_error,
    chat_body,
    envoy_stat,
    freeze_for,
    frozen,
    topology,
)

pytestmark = pytest.mark.e2e

MESSAGE_TIMEOUT_MS = 300
PAUSE_S = 1.5  # how long a slow EPP takes: five message timeouts
KEEPALIVE_MS = 500  # a hung EPP is found after interval + timeout = 1 s


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
@pytest.mark.parametrize("mode", ["ext_proc", "sidecar"])
def test_an_epp_slower_than_the_message_timeout_is_waited_for(eppkit_testbed_factory, mode):
    traits = TRAITS[mode]
    bed = eppkit_testbed_factory(topology(mode, epp_message_timeout_ms=MESSAGE_TIMEOUT_MS))
    client = bed.client()
    assert client.chat(chat_body()).status == 200  # the gRPC connection to the EPP is open
    pause = freeze_for(bed.services["epp"].process, PAUSE_S)
    t0 = time.monotonic()
    result = client.chat(chat_body())
    waited = time.monotonic() - t0
    pause.join()
    client.flush()

    assert result.status == 200, result.body
    assert waited >= PAUSE_S * 0.8, f"served in {waited:.2f} s: the EPP was not in the way"
    assert envoy_stat(bed, "http.ingress.ext_proc.message_timeouts") == 0, "Envoy 1.40 arms no timer here"
    check = TraceCheck(bed.jaeger.wait_for_trace(result.trace_id, [
        traits.picker_call, Epp.PROCESS, traits.upstream, Vllm.REQUEST]))
    call = check.one(traits.picker_call, Service.ENVOY)
    assert call.duration_ms >= PAUSE_S * 1000 * 0.8, f"Envoy's ext_proc span lasted {call.duration_ms:.0f} ms"
    check.before(check.one(Epp.PROCESS), check.one(traits.upstream), slack_ms=1.0)


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
@pytest.mark.parametrize("failure_mode_allow", [False, True], ids=["closed", "open"])
@pytest.mark.parametrize("mode", cases(["ext_proc", "sidecar"], "ext_proc", why="a component frozen"))
def test_a_hung_epp_fails_closed_once_keepalive_finds_it(eppkit_testbed_factory, mode, failure_mode_allow):
    traits = TRAITS[mode]
    bed = eppkit_testbed_factory(topology(mode, epp_message_timeout_ms=MESSAGE_TIMEOUT_MS, epp_keepalive_ms=KEEPALIVE_MS,
                                   failure_mode_allow=failure_mode_allow))
    client = bed.client()
    assert client.chat(chat_body()).status == 200
    with frozen(bed.services["epp"].process):
        t0 = time.monotonic()
        result = client.chat(chat_body(), timeout_s=30)
        waited = time.monotonic() - t0
    client.flush()

    # Fail-closed either way: failure_mode_allow is not honoured once request body went to the EPP.
    assert_openai_error(result.status, result.body, 500, mentions="ext_proc_error")
    assert waited < 2 * 2 * KEEPALIVE_MS / 1000 + 2, f"a hung EPP held the request {waited:.1f} s"
    check = TraceCheck(bed.jaeger.wait_for_trace(result.trace_id, [Envoy.INGRESS, traits.picker_call],
                                                 quiet_s=1.0))
    check.absent(Vllm.REQUEST, Service.VLLM)
    check.attribute(check.one(Envoy.INGRESS, Service.ENVOY), Envoy.HTTP_STATUS_CODE, "500")
    assert_kit_healthy(bed)
    again = client.chat(chat_body())  # the EPP runs again; Envoy opens a new connection
    assert again.status == 200, again.body


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
def test_a_hung_frontend_is_a_503_after_the_epps_frontend_timeout(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(topology("sidecar", epp_args=["--frontend-timeout", "1"]))
    client = bed.client()
    assert client.chat(chat_body()).status == 200
    with frozen(bed.services["frontend"].process):
        t0 = time.monotonic()
        result = client.chat(chat_body())
        waited = time.monotonic() - t0
    client.flush()

    assert_openai_error(result.status, result.body, 503, code="frontend_unreachable")
    assert 0.8 <= waited < 5, f"answered after {waited:.1f} s, expected about the 1 s frontend timeout"
    check = TraceCheck(bed.jaeger.wait_for_trace(result.trace_id, [Epp.PROCESS, Epp.PICK],
                                                 quiet_s=1.0))
    check.absent(Vllm.REQUEST, Service.VLLM)
    pick = check.one(Epp.PICK, Service.EPP)
    assert pick.error and pick.duration_ms >= 800, f"epp.pick: error={pick.error}, {pick.duration_ms:.0f} ms"
    check.attribute(check.one(Epp.PROCESS), Http.RESPONSE_STATUS_CODE, 503)
    assert client.chat(chat_body()).status == 200  # the frontend runs again


CALLOUT_CASES = [
    # (mode, failure_mode_allow, status): lua-callout fail-closed is in test_mode_callouts.py
    ("lua-callout", True, 200),
    ("dynmod-callout", False, 502),
    ("dynmod-callout", True, 200),
]


@pytest.mark.eppkit_alone("answered within 350 ms, the call within 40 ms of its timeout")
@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
@pytest.mark.parametrize("mode, failure_mode_allow, status", CALLOUT_CASES,
                         ids=[f"{m}-{'open' if f else 'closed'}" for m, f, _ in CALLOUT_CASES])
def test_a_callout_slower_than_its_timeout_fails_closed_or_open(eppkit_testbed_factory, mode, failure_mode_allow, status):
    traits = TRAITS[mode]
    bed = eppkit_testbed_factory(topology(mode, callout_timeout_ms=100, pick_latency_ms=400,
                                   failure_mode_allow=failure_mode_allow))
    client = bed.client()
    t0 = time.monotonic()
    result = client.chat(chat_body())
    waited = time.monotonic() - t0
    client.flush()

    assert waited < 0.35, f"the 100 ms callout timeout took {waited * 1000:.0f} ms"
    if status == 200:
        assert result.status == 200, result.body
        assert result.headers["x-eppkit-callout"].startswith("fail-open: "), result.headers
        spans = [traits.picker_call, traits.fallback_upstream, Vllm.REQUEST]
    else:
        assert_openai_error(result.status, result.body, status, code="callout_unavailable", mentions="504")
        spans = [Envoy.INGRESS, traits.picker_call]
    # callout.pick ends 400 ms in, after Envoy gave up on it: wait for it too.
    check = TraceCheck(bed.jaeger.wait_for_trace(result.trace_id, spans + [Callout.PICK], quiet_s=0.5))
    call = check.one(traits.picker_call, Service.ENVOY)
    check.duration(call, 100.0, 40.0)
    assert check.one(Callout.PICK).end_us > call.end_us, "the callout was still picking when Envoy gave up"
    if status == 200:
        check.before(call, check.one(traits.fallback_upstream))
        check.absent(traits.upstream)
    else:
        check.absent(Vllm.REQUEST, Service.VLLM)
    assert_kit_healthy(bed)
