"""The picker (EPP, frontend sidecar, callout service) crashes: fail-closed answers a clear 5xx,
fail-open (``failure_mode_allow``) routes to the default pool, both visible in the trace, and
the gateway picks again once the picker is back.

A crash is SIGKILL (``docker kill`` in the docker runtime): no goodbye on its sockets. The
graceful-stop variants of the single-mode files (test_mode_*.py) stay there.
"""

from dataclasses import dataclass

import pytest
from eppkit.observability.contract import Client, Envoy, Epp, Http, Service, Vllm

from eppkit import TraceCheck
from tests.support.contract import cases
from tests.support.reliability import (
    TRAITS,
    assert_kit_healthy,
    assert_openai_error,
    chat_body,
    kill,
    restart,
    topology,
    wait_for_cluster_health,
)

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Case:
    mode: str
    down: str  # the component that crashes
    closed_status: int  # what the client gets by default (fail-closed)
    closed_code: object  # its error.code
    open_status: int  # what the client gets with failure_mode_allow
    fails_open: bool  # with failure_mode_allow the request reaches the default pool

    @property
    def id(self) -> str:
        return f"{self.mode}-{self.down}"


CASES = [
    # Envoy's ext_proc status_on_error (500); the health check has marked the EPP down, so the gRPC
    # stream fails on the headers, where failure_mode_allow is still honoured (docs/modes-ext_proc.md).
    Case("ext_proc", "epp", 500, 500, 200, True),
    Case("sidecar", "epp", 500, 500, 200, True),
    # The EPP is up and answers 503 itself: Envoy's failure_mode_allow has nothing to act on.
    Case("sidecar", "frontend", 503, "frontend_unreachable", 503, False),
    # The callout filters answer 502 callout_unavailable, or take the round-robin pool.
    Case("lua-callout", "callout", 502, "callout_unavailable", 200, True),
    Case("dynmod-callout", "callout", 502, "callout_unavailable", 200, True),
]


def _crash(bed, case: Case) -> None:
    kill(bed, case.down)
    if case.down == "epp":  # as long as Envoy still thinks the EPP is healthy, a POST fails closed anyway
        wait_for_cluster_health(bed, "epp", healthy=False)


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
@pytest.mark.parametrize("case", cases(CASES, CASES[0], why="a component killed and restarted"), ids=lambda c: c.id)
def test_picker_crash_fails_closed_with_a_clear_5xx_and_picking_resumes_after_restart(eppkit_testbed_factory, case):
    traits = TRAITS[case.mode]
    bed = eppkit_testbed_factory(topology(case.mode))
    _crash(bed, case)
    client = bed.client()
    result = client.chat(chat_body())
    client.flush()

    assert_openai_error(result.status, result.body, case.closed_status, code=case.closed_code)
    assert "x-inference-pod" not in result.headers, "a fail-closed request must not reach a backend"
    trace = bed.jaeger.wait_for_trace(result.trace_id, [Client.REQUEST, Envoy.INGRESS],
                                      quiet_s=1.0)
    check = TraceCheck(trace)
    check.absent(Vllm.REQUEST, Service.VLLM)
    ingress = check.one(Envoy.INGRESS, Service.ENVOY)
    check.attribute(ingress, Envoy.HTTP_STATUS_CODE, str(case.closed_status))
    assert check.one(Client.REQUEST).error, "the client's span shows the failure"
    if case.down == "frontend":  # the EPP answered: its span says why
        check.attribute(check.one(Epp.PROCESS, Service.EPP), Http.RESPONSE_STATUS_CODE, 503)
    assert_kit_healthy(bed, except_=(case.down,))

    restart(bed, case.down)
    if case.down == "epp":
        wait_for_cluster_health(bed, "epp", healthy=True)
    again = client.chat(chat_body())
    client.flush()
    assert again.status == 200, again.body
    check = TraceCheck(bed.jaeger.wait_for_trace(again.trace_id, [traits.upstream, Vllm.REQUEST]))
    check.absent(traits.fallback_upstream)  # picked again, not the fail-open route


@pytest.mark.eppkit_needs_mock("reads the mock's vllm spans")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_picker_crash_with_failure_mode_allow_routes_to_the_default_pool(eppkit_testbed_factory, case):
    traits = TRAITS[case.mode]
    bed = eppkit_testbed_factory(topology(case.mode, failure_mode_allow=True))
    _crash(bed, case)
    client = bed.client()
    results = [client.chat(chat_body(stream=stream)) for stream in (False, True)]
    client.flush()

    if not case.fails_open:
        for r in results:
            assert_openai_error(r.status, r.body, case.open_status, code=case.closed_code)
        return
    assert [r.status for r in results] == [case.open_status] * 2, [r.body for r in results]
    assert {r.headers["x-inference-pod"] for r in results} == {"vllm-0", "vllm-1"}, "round-robin over the pool"
    if traits.picker == "callout":
        assert results[0].headers["x-eppkit-callout"].startswith("fail-open: ")
    check = TraceCheck(bed.jaeger.wait_for_trace(
        results[0].trace_id, [Envoy.INGRESS, traits.fallback_upstream, Vllm.REQUEST]))
    check.absent(traits.upstream)  # nobody picked
    for service in traits.pickers:
        assert not [s for s in check.trace.spans if s.service == service], f"{service} cannot have decided"
    if traits.picker == "callout":  # the failed call is in the trace, before the fallback upstream
        check.before(check.one(traits.picker_call, Service.ENVOY), check.one(traits.fallback_upstream, Service.ENVOY))
    assert_kit_healthy(bed, except_=(case.down,))
