"""The gaie-epp mode: the GAIE EPP v1.5.0's command line, the pool it watches, pods on their own addresses."""

from pathlib import Path

import pytest
from eppkit import modes
from eppkit.builds import gaie as gaie_build
from eppkit.components.ports import PortAllocator
from eppkit.modes import gaie_epp
from eppkit.plan import Endpoint, PoolTarget
from eppkit.topology import Topology, VllmSpec
from tests.support import kit

pytestmark = pytest.mark.unit

BACKENDS = [Endpoint("vllm-0", "127.0.0.2", 18000), Endpoint("vllm-1", "127.0.0.3", 18000)]
POOL = PoolTarget("/run/bed/kubeconfig", "bed-ns", "vllm-pool")


@pytest.fixture(autouse=True)
def built(monkeypatch):
    monkeypatch.setattr(gaie_build, "build", lambda progress=print, **_: Path("/cache/gaie-epp/v1.5.0/epp"))


def plan(backends=BACKENDS, flow="aggregated", **options):
    return modes.plan(Topology(mode="gaie-epp", flow=flow, options=options), PortAllocator(), backends, kube=POOL)


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_the_epp_watches_the_testbeds_pool_through_its_kubeconfig():
    (epp,) = plan().services
    assert (flag(epp.argv, "--pool-name"), flag(epp.argv, "--pool-namespace")) == (POOL.name, POOL.namespace)
    assert epp.env["KUBECONFIG"] == POOL.kubeconfig
    assert modes.get("gaie-epp").watches_pool(modes.options_for(Topology(mode="gaie-epp")))
    with pytest.raises(ValueError, match="watches an InferencePool"):
        modes.plan(Topology(mode="gaie-epp"), PortAllocator(), BACKENDS)


def test_the_epp_gets_its_pool_its_ports_plaintext_and_otel_and_is_ready_on_grpc_health():
    (epp,) = plan().services
    argv = epp.argv
    assert argv[0] == "/cache/gaie-epp/v1.5.0/epp"
    assert flag(argv, "--grpc-port") == str(epp.port) and epp.grpc_health_port == int(flag(argv, "--grpc-health-port"))
    assert "--secure-serving=false" in argv and "--metrics-endpoint-auth=false" in argv
    assert "--config-text" not in argv and "--config-file" not in argv  # the EPP's built-in default plugins
    assert epp.standard_otel and epp.env["OTEL_SERVICE_NAME"] == gaie_epp.OTEL_SERVICE
    assert epp.name == modes.get("gaie-epp").picker


def test_conformance_and_a_config_of_your_own():
    assert "header-based-testing-filter" in flag(plan(conformance=True).services[0].argv, "--config-text")
    assert flag(plan(epp_config="/x/epp.yaml").services[0].argv, "--config-file") == "/x/epp.yaml"
    with pytest.raises(ValueError, match="give one"):
        plan(conformance=True, epp_config="/x/epp.yaml")


def test_flow_control_turns_its_feature_gate_on_with_the_ttl_and_round_robin_fairness():
    config = flag(plan(flow_control=True, default_request_ttl=5).services[0].argv, "--config-text")
    assert "featureGates:\n- flowControl" in config and "defaultRequestTTL: 5s" in config
    assert "fairnessPolicyRef: round-robin-fairness-policy" in config and "pluginRef: queue-scorer" in config
    with pytest.raises(ValueError, match="give one"):
        plan(flow_control=True, epp_config="/x/epp.yaml")
    with pytest.raises(ValueError, match="more than 0"):
        plan(flow_control=True, default_request_ttl=0)


def test_a_disaggregated_flow_is_refused():
    with pytest.raises(ValueError, match="runs the aggregated flow"):
        modes.check(Topology(mode="gaie-epp", flow="pd"))


def test_in_this_mode_the_mocks_listen_on_their_own_loopback_addresses_on_one_port(tmp_path):
    layout = kit.plan_flow(Topology(mode="gaie-epp", vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1"), VllmSpec("vllm-2")]),
                        PortAllocator(), tmp_path)
    assert [(s.host, e.host) for s, e in zip(layout.services, layout.routable)] == [
        ("127.0.0.2",) * 2, ("127.0.0.3",) * 2, ("127.0.0.4",) * 2]
    assert len({e.port for e in layout.routable}) == 1
    other = kit.plan_flow(Topology(mode="ext_proc", vllm=[VllmSpec("vllm-0"), VllmSpec("vllm-1")]), PortAllocator(), tmp_path)
    assert {e.host for e in other.routable} == {"127.0.0.1"}


def test_without_go_the_build_fails_with_the_how_to(monkeypatch, tmp_path):
    monkeypatch.undo()
    monkeypatch.setenv("EPPKIT_CACHE", str(tmp_path))
    monkeypatch.setattr(gaie_build.shutil, "which", lambda name: None)
    with pytest.raises(gaie_build.GaieBuildError, match="eppkit bootstrap"):
        gaie_build.build()
