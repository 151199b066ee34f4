"""The tenant gate behind a real Envoy, checked on the responses and on the Jaeger traces.

Written against eppkit's public API only: the pytest plugin's fixtures, Topology, DynamicModule, TraceCheck.
eppkit builds module/ (its own Go module) on first use and caches the build.
"""

from pathlib import Path

import pytest

from eppkit import DynamicModule, Topology, TraceCheck, VllmSpec

pytestmark = pytest.mark.e2e

MODULE = Path(__file__).parents[1] / "module"
GATE = DynamicModule(MODULE, filter_name="tenant_gate", config={"tenants": {"sk-team-a": "team-a"}})
TWO_PODS = [VllmSpec(name="pod-a"), VllmSpec(name="pod-b")]
CHAT = {"model": "mock-llm", "max_tokens": 4, "messages": [{"role": "user", "content": "Who am I?"}]}
TEAM_A = {"authorization": "Bearer sk-team-a"}


@pytest.mark.eppkit_topology(mode="ext_proc", vllm=TWO_PODS, filters=[GATE])
def test_an_unknown_key_gets_a_401_and_never_reaches_the_picker(eppkit_testbed, eppkit_client):
    result = eppkit_client.chat(CHAT, headers={"authorization": "Bearer sk-guess"})
    assert result.status == 401
    assert result.body["error"] == {"message": "Incorrect API key provided.", "type": "AuthenticationError",
                                    "param": None, "code": "invalid_api_key"}

    check = TraceCheck(eppkit_testbed.wait_for_trace(result, [("client", "client.request"), ("envoy", "ingress")]))
    assert check.one("ingress", "envoy").attributes["http.status_code"] == "401"
    check.absent("epp.pick")
    check.absent("llm_request")


@pytest.mark.eppkit_runtime_contract("a request through the testbed, where it runs")
@pytest.mark.eppkit_topology(mode="ext_proc", vllm=TWO_PODS, filters=[GATE])
def test_a_known_key_is_tagged_with_its_tenant_and_served_by_the_picked_pod(eppkit_testbed, eppkit_client):
    result = eppkit_client.chat(CHAT, headers={**TEAM_A, "x-tenant": "team-b"})  # a client cannot choose its tenant
    assert result.status == 200, result.body
    assert result.headers["x-tenant"] == "team-a"

    check = TraceCheck(eppkit_testbed.wait_for_trace(result))
    pick = check.one("epp.pick", "epp")
    assert result.headers["x-inference-pod"] == pick.attributes["epp.endpoint.name"]
    check.before(pick, check.one("llm_request", "vllm"))


def test_the_gate_runs_beside_a_go_picker_module(eppkit_testbed_factory):
    # dynmod-callout: eppkit's own Go module picks; the gate is a second Go module in the same Envoy.
    bed = eppkit_testbed_factory(Topology(mode="dynmod-callout", vllm=TWO_PODS, filters=[GATE]))
    client = bed.client()
    assert client.chat(CHAT).status == 401
    result = client.chat(CHAT, headers=TEAM_A)
    assert result.status == 200 and result.headers["x-tenant"] == "team-a"
    check = TraceCheck(bed.wait_for_trace(result))
    check.before(check.one("dynmod callout", "envoy"), check.one("llm_request", "vllm"))
