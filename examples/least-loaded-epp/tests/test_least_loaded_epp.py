"""The least-loaded EPP behind eppkit's real Envoy: its decision is in the request's trace, the pod it picked
answers, and it passes eppkit's conformance suite (one test per check)."""

import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from eppkit import Topology, TraceCheck, VllmSpec
from eppkit.conformance.testing import conformance_tests

COMMAND = (f"{sys.executable} -m least_loaded_epp --port {{grpc_port}} --health-port {{health_port}} "
           "--endpoints {endpoints} --shed-header x-shed")
DECISION = "least-loaded-epp:least_loaded.pick"
# Response processing on: the EPP's stream then lasts until the response ends, which is how it knows which
# requests are still in flight on a pod.
EPP = {"epp_command": COMMAND, "decision_span": DECISION, "epp_process_response": True}


@pytest.mark.eppkit_runtime_contract("a request through the testbed, where it runs")
@pytest.mark.eppkit_topology(mode="external-epp", vllm=[VllmSpec("pod-a"), VllmSpec("pod-b")], options=EPP)
def test_the_decision_is_in_the_trace_and_the_picked_pod_answers(eppkit_testbed, eppkit_client):
    result = eppkit_client.chat({"model": "mock-llm", "messages": [{"role": "user", "content": "hi"}]})
    assert result.status == 200
    trace = eppkit_testbed.wait_for_trace(result)  # waits for the EPP's decision span too (decision_span)
    check = TraceCheck(trace)
    path = check.request_path(eppkit_testbed.mode)
    picked = path.decision.attributes["least_loaded.endpoint"]
    assert result.headers["x-gateway-destination-endpoint-served"] == picked
    check.follows_contract(also=[DECISION])  # its own span, declared


def test_a_busy_pod_is_not_picked(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(Topology(mode="external-epp", vllm=[VllmSpec("pod-a"), VllmSpec("pod-b")],
                                          options=EPP))
    client = bed.client()
    slow = {"model": "mock-llm", "max_tokens": 40, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with ThreadPoolExecutor(2) as pool:
        busy = pool.submit(client.chat, slow)  # holds one pod for ~0.5 s
        time.sleep(0.2)
        quick = client.chat({"model": "mock-llm", "max_tokens": 1, "messages": [{"role": "user", "content": "y"}]})
        assert busy.result().status == quick.status == 200
    assert quick.headers["x-inference-pod"] != busy.result().headers["x-inference-pod"]


test_conforms = conformance_tests(options=EPP, shed_header="x-shed: 1")
