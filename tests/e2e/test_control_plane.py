"""The Kubernetes control plane a controller EPP watches, and what goes wrong with it, told clearly.

- The session's control plane is a real kube-apiserver: each testbed has its own namespace there with its
  InferencePool and one Ready Pod per mock, on the mock's loopback address and the pool's one target port;
  its kubeconfig is in the run folder (``kubectl --kubeconfig`` works with it).
- A pod address outside 127.0.0.0/8 is refused before anything starts.
- An EPP that watches a kind the control plane has no CRD for fails its start with that kind named.
- ``eppkit run`` without the control plane's binaries says what is missing and what to do, without a traceback.
"""

import os
import subprocess

import pytest

from eppkit.builds import gaie as gaie_build
from eppkit.components.controlplane import ControlPlaneError
from eppkit.components.inference_pool import POOL_CRD
from tests.support.churn import KIT_EPP_CONTROLLER_COMMAND, watcher_topology
from tests.support.cli import EPPKIT, REPO_ROOT
from tests.support.reliability import chat_body, require_gaie_epp, topology

pytestmark = pytest.mark.e2e


def test_each_testbed_has_its_namespace_with_its_pool_and_a_ready_pod_per_mock(eppkit_testbed_factory,
                                                                                eppkit_control_plane):
    bed = eppkit_testbed_factory(watcher_topology("kit-epp", ("vllm-0", "vllm-1")))
    other = eppkit_testbed_factory(watcher_topology("kit-epp", ("vllm-0",)))
    assert bed.pool.plane is other.pool.plane is eppkit_control_plane  # one control plane for the session
    assert bed.pool.target.namespace != other.pool.target.namespace
    pods = bed.pool.pods()
    assert [(p.name, p.ip, p.ready) for p in pods] == [("vllm-0", "127.0.0.2", True), ("vllm-1", "127.0.0.3", True)]
    assert {(ep.host, ep.port) for ep in bed.backends} == set(bed.pool.endpoints())
    assert POOL_CRD in eppkit_control_plane.served_crds()
    assert bed.kubeconfig == bed.run_dir / "kubeconfig" and bed.kubeconfig.is_file()
    result = bed.client().chat(chat_body())
    assert result.status == 200 and result.headers.get("x-inference-pod") in {"vllm-0", "vllm-1"}, result.body


@pytest.mark.eppkit_prepare("gaie-epp", "control-plane")  # its testbed watches a pool
def test_gaies_epp_runs_as_a_controller_epp_of_your_own_would(eppkit_testbed_factory):
    require_gaie_epp()
    binary = gaie_build.build()
    command = (f"{binary} --pool-name {{pool_name}} --pool-namespace {{pool_namespace}} --grpc-port {{grpc_port}} "
               "--grpc-health-port {health_port} --metrics-port {metrics_port} --secure-serving=false")
    bed = eppkit_testbed_factory(topology("external-epp", vllm=("vllm-0", "vllm-1"), epp_command=command))
    client = bed.client()
    answered = {client.chat(chat_body(f"{i} which pod?")).headers.get("x-inference-pod") for i in range(6)}
    assert answered <= {"vllm-0", "vllm-1"} and answered, answered
    assert f'"pool-namespace":"{bed.pool.target.namespace}"' in (bed.run_dir / "epp.log").read_text()


@pytest.mark.eppkit_prepare("control-plane")
def test_a_pod_address_outside_loopback_is_refused_before_anything_starts(eppkit_testbed_factory):
    bed = eppkit_testbed_factory(watcher_topology("kit-epp", ("vllm-0",)))
    with pytest.raises(ValueError, match=r"10\.1\.2\.3 is outside 127\.0\.0\.0/8"):
        bed.pool.add_pod("stray", ip="10.1.2.3")
    assert [p.name for p in bed.pool.pods()] == ["vllm-0"] and "stray" not in bed.services


@pytest.mark.eppkit_prepare("control-plane")
def test_an_epp_watching_a_kind_without_a_crd_fails_naming_the_kind(eppkit_testbed_factory):
    command = KIT_EPP_CONTROLLER_COMMAND + " --pool-group inference.networking.x-k8s.io"
    with pytest.raises(ControlPlaneError) as failed:
        eppkit_testbed_factory(topology("external-epp", vllm=("vllm-0",), epp_command=command))
    message = str(failed.value)
    assert "InferencePool (inference.networking.x-k8s.io/v1alpha2)" in message, message
    assert "no CRD for it" in message and "Hint:" in message and POOL_CRD in message


def test_run_without_the_control_plane_binaries_says_what_to_do(eppkit_runtime, tmp_path):
    env = {**os.environ, "EPPKIT_RUNS": str(tmp_path), "EPPKIT_KUBE_ASSETS": str(tmp_path / "nothing-here")}
    proc = subprocess.run(EPPKIT + ["run", "--runtime", eppkit_runtime, "--mode", "gaie-epp"], capture_output=True,
                          text=True, timeout=120, env=env, cwd=REPO_ROOT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "EPPKIT_KUBE_ASSETS" in proc.stderr and "holds no etcd and kube-apiserver" in proc.stderr, proc.stderr
    assert "Hint:" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
