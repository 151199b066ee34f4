"""The first-use builds, listed once (eppkit.runtimes.first_use): what a topology needs of them; and the session's
vLLM servers telling a missing preset as a missing prerequisite. (The plugin building them before a session's first
test, and the same through a whole session: tests/integration/test_prepare_builds.py.)"""

from __future__ import annotations

import pytest

from eppkit.pytest_plugin import state
from eppkit.pytest_plugin.session import SessionServers
from eppkit.runtimes import first_use
from eppkit.topology import Topology, VllmSpec

pytestmark = pytest.mark.unit

POOL_COMMAND = "my-epp --port {grpc_port} --kubeconfig {kubeconfig}"


@pytest.mark.parametrize("topology, needs", [
    (Topology(mode="gaie-epp"), ["gaie-epp", "control-plane"]),
    (Topology(mode="external-epp", options={"epp_command": POOL_COMMAND}), ["control-plane"]),
    (Topology(mode="external-epp", options={"epp_command": "my-epp --port {grpc_port}"}), []),
    (Topology(mode="ext_proc"), []),
    (Topology(mode="no-such-mode"), []),  # its testbed says what is wrong
], ids=["gaie-epp", "external-epp-pool", "external-epp", "ext_proc", "bad-mode"])
def test_a_topology_needs_the_builds_its_testbed_runs(topology, needs):
    assert first_use.needs(topology) == needs


def test_every_testbed_of_a_container_runtime_needs_its_images_and_no_local_one_does():
    assert first_use.runtime_needs("docker") == first_use.runtime_needs("kubernetes") == ["images"]
    assert first_use.runtime_needs("local") == []
    assert first_use.needs(Topology(mode="gaie-epp"), "docker") == ["gaie-epp", "control-plane", "images"]


class _Pool:
    """A ServerPool without the preset installed."""

    def backend_for(self, topology):
        raise FileNotFoundError("the vLLM preset is not installed. Run `eppkit bootstrap --backend vllm`")

    def kill(self, name: str) -> str:
        return f"killed {name}"


VLLM = Topology(backend="vllm", vllm=[VllmSpec("vllm-0")])


def test_the_sessions_vllm_servers_skip_saying_how_to_get_the_preset(monkeypatch):
    monkeypatch.setattr(state, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match=r"eppkit bootstrap --backend vllm"):
        SessionServers(_Pool()).backend_for(VLLM)
    assert SessionServers(_Pool()).kill("vllm-0") == "killed vllm-0"  # the rest of the pool, as it is


def test_in_ci_the_missing_vllm_preset_fails(monkeypatch):
    monkeypatch.setattr(state, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match=r"prerequisite missing in CI: the vLLM preset is not installed"):
        SessionServers(_Pool()).backend_for(VLLM)
