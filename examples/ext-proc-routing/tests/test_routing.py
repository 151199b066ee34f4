"""A team's routing checks, written against eppkit's public API only.

The team runs an ext_proc Endpoint Picker in front of two vLLM pods and wants, on every change:
the pod that answers is the one the picker chose, and the decision is over before Envoy opens
the upstream request (so the picker never delays the prefill it routes).
"""

import pytest

from eppkit import Topology, TraceCheck, VllmSpec

pytestmark = pytest.mark.e2e

TWO_PODS = [VllmSpec(name="pod-a"), VllmSpec(name="pod-b")]
CHAT = {"model": "mock-llm", "max_tokens": 4,
        "messages": [{"role": "user", "content": "Which pod am I talking to?"}]}


@pytest.mark.eppkit_runtime_contract("a request through the testbed, where it runs")
@pytest.mark.eppkit_topology(mode="ext_proc", vllm=TWO_PODS)
def test_the_pod_that_answers_is_the_one_the_picker_chose(eppkit_testbed, eppkit_client):
    result = eppkit_client.chat(CHAT)
    assert result.status == 200, result.body

    trace = eppkit_testbed.wait_for_trace(result)
    check = TraceCheck(trace)
    pick = check.one("epp.pick", "epp")
    assert result.headers["x-inference-pod"] == pick.attributes["epp.endpoint.name"]


@pytest.mark.eppkit_topology(mode="ext_proc", vllm=TWO_PODS)
def test_the_decision_ends_before_the_upstream_request_starts(eppkit_testbed, eppkit_client):
    result = eppkit_client.chat({**CHAT, "stream": True})
    assert result.status == 200 and result.tokens

    check = TraceCheck(eppkit_testbed.wait_for_trace(result))
    upstream = [s for s in check.all(service="envoy") if s.name.startswith("router ")]
    assert len(upstream) == 1, "one upstream attempt"
    check.before(check.one("epp.pick", "epp"), upstream[0])
    check.within(check.one("vllm.prefill", "vllm"), upstream[0])


def test_a_shared_testbed_serves_every_pod_in_turn(eppkit_shared_testbed_factory):
    # Only requests and traces here, so one testbed can serve this module's tests.
    bed = eppkit_shared_testbed_factory(Topology(mode="ext_proc", vllm=TWO_PODS,
                                                 options={"scorer": "round-robin"}))
    client = bed.client()
    pods = {client.chat(CHAT).headers.get("x-inference-pod") for _ in range(4)}
    assert pods == {"pod-a", "pod-b"}
