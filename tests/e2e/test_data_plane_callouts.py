"""The data-plane checks of the Gateway API Inference Extension's conformance suite, ported (the
idea, not their code) and run against the callout modes through a real Envoy (the EPPs behind ext_proc
get the whole conformance suite: test_conformance_suite.py):

- the gateway follows the picker's pick: GAIE's test header ``test-epp-endpoint-selection`` forces
  it, and the pod that answers is the one named;
- a pick with fallbacks (``primary,fallback``) whose primary is down is served by the fallback
  (Envoy's picked cluster retries down the list);
- the endpoint that served comes back as ``x-gateway-destination-endpoint-served`` (Envoy's
  ``envoy.lb`` metadata of the same name), for forced and for scored picks alike;
- with the picker unavailable and fail-open (``failure_mode_allow``) requests are still served.
"""

import pytest
from eppkit.observability.contract import Cluster, Envoy, Service
from eppkit.services.picker import headers

from eppkit import TraceCheck
from eppkit.conformance.target import EPP_MODES
from tests.support.reliability import (
    EPP_PROTOCOL_MODES,
    TRAITS,
    chat_body,
    envoy_stat,
    kill,
    topology,
    wait_for_cluster_health,
)

# Under pytest-xdist each mode's shared testbed is a group of its own.
pytestmark = [pytest.mark.e2e, pytest.mark.eppkit_share_per("mode")]

VLLM = ("vllm-0", "vllm-1", "vllm-2")
POD = "x-inference-pod"


# The picker modes whose picker is not an EPP behind ext_proc: the callouts.
CALLOUT_MODES = tuple(m for m in EPP_PROTOCOL_MODES if m not in EPP_MODES)


@pytest.fixture(params=CALLOUT_MODES)
def mode(request) -> str:
    return request.param


def address(bed, name: str) -> str:
    return next(ep.address for ep in bed.backends if ep.name == name)


def test_the_gateway_follows_the_pick_and_reports_the_endpoint_that_served(eppkit_shared_testbed_factory, mode):
    bed = eppkit_shared_testbed_factory(topology(mode, vllm=VLLM))
    client = bed.client()
    for name in ("vllm-2", "vllm-0", "vllm-1"):
        result = client.chat(chat_body(), headers={headers.TEST_ENDPOINT_SELECTION: address(bed, name)})
        assert (result.status, result.headers.get(POD)) == (200, name), result.body
        assert result.headers.get(headers.SERVED) == address(bed, name)
    # Unforced: whatever the picker chose, the served endpoint is the pod that answered.
    served = {}
    for _ in range(4):
        result = client.chat(chat_body())
        assert result.status == 200, result.body
        served[result.headers.get(POD)] = result.headers.get(headers.SERVED)
    assert served and all(value == address(bed, pod) for pod, value in served.items()), served


def test_a_pick_whose_primary_is_down_is_served_by_its_fallback(eppkit_testbed_factory, mode):
    bed = eppkit_testbed_factory(topology(mode, vllm=VLLM))
    kill(bed, "vllm-0")
    pick = f"{address(bed, 'vllm-0')},{address(bed, 'vllm-2')}"
    n = 3
    client = bed.client()
    retries_before = envoy_stat(bed, f"cluster.{Cluster.PICKED}.upstream_rq_retry")
    results = [client.chat(chat_body(), headers={headers.TEST_ENDPOINT_SELECTION: pick}) for _ in range(n)]
    client.flush()
    assert [(r.status, r.headers.get(POD), r.headers.get(headers.SERVED)) for r in results] == \
        [(200, "vllm-2", address(bed, "vllm-2"))] * n, [r.body for r in results]
    # A request whose list starts with the dead primary tried it first: one retry, down the list.
    retries = envoy_stat(bed, f"cluster.{Cluster.PICKED}.upstream_rq_retry") - retries_before
    assert retries == n, retries

    trace = bed.jaeger.wait_for_trace(results[-1].trace_id, [Envoy.INGRESS, TRAITS[mode].upstream])
    check = TraceCheck(trace)
    attempts = check.all(TRAITS[mode].upstream, Service.ENVOY)
    assert [s.attributes.get(Envoy.UPSTREAM_ADDRESS) for s in attempts][-1] == address(bed, "vllm-2")


def test_with_the_picker_unavailable_fail_open_still_serves(eppkit_testbed_factory, mode):
    traits = TRAITS[mode]
    bed = eppkit_testbed_factory(topology(mode, failure_mode_allow=True))
    kill(bed, traits.picker)
    if traits.picker == Service.EPP:  # fail-open needs Envoy to know the EPP is down (docs/modes-ext_proc.md)
        wait_for_cluster_health(bed, "epp", healthy=False)
    client = bed.client()
    results = [client.chat(chat_body()) for _ in range(4)]
    client.flush()
    assert [r.status for r in results] == [200] * 4, [r.body for r in results]
    assert {r.headers.get(POD) for r in results} == {"vllm-0", "vllm-1"}  # round-robin over the pool
    # Nobody picked: the round-robin route, which reports no picked endpoint.
    assert all(headers.SERVED not in r.headers for r in results)
    trace = bed.jaeger.wait_for_trace(results[-1].trace_id, [Envoy.INGRESS, traits.fallback_upstream])
    TraceCheck(trace).absent(traits.upstream)
