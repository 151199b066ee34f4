"""The least-loaded EPP shipped as an image (its Dockerfile), run by eppkit as a container (docker runtime) or a
Pod (kubernetes runtime) instead of a command of this host: it serves behind the real Envoy, with its decision in
the request's trace, and passes the conformance checks that run first (serving and the ext_proc protocol)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eppkit import Topology, TraceCheck, VllmSpec

# Images run on the docker and kubernetes runtimes: on the local one these tests are deselected (not skipped).
pytestmark = [pytest.mark.eppkit_runtimes("docker", "kubernetes"),
              pytest.mark.eppkit_runtime_contract("the EPP in its own image: a container, a Pod")]

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "least-loaded-epp:test"
ARGS = "--port {grpc_port} --health-port {health_port} --endpoints {endpoints} --shed-header x-shed"
DECISION = "least-loaded-epp:least_loaded.pick"


@pytest.fixture(scope="session")
def epp_image() -> str:
    """The EPP's image, built from its Dockerfile on eppkit's services image (a Python that has its dependencies:
    this machine reaches no registry; yours would build FROM python:3.11-slim)."""
    assert shutil.which("docker"), "docker is needed to build the EPP's image"
    tags = subprocess.run([sys.executable, "-m", "eppkit", "cluster", "images"], capture_output=True, text=True,
                          check=True).stdout.split()
    base = next(tag for tag in tags if tag.startswith("eppkit/services:"))
    subprocess.run(["docker", "build", "-q", "--build-arg", f"BASE={base}", "-t", IMAGE, str(ROOT)], check=True,
                   capture_output=True)
    return IMAGE


def test_its_image_serves_behind_envoy_with_its_decision_in_the_trace(eppkit_testbed_factory, epp_image):
    bed = eppkit_testbed_factory(Topology(mode="external-epp", vllm=[VllmSpec("pod-a"), VllmSpec("pod-b")],
                                          options={"epp_image": epp_image, "epp_command": ARGS,
                                                   "decision_span": DECISION}))
    result = bed.client().chat({"model": "mock-llm", "messages": [{"role": "user", "content": "from an image"}]})
    assert result.status == 200, (result.status, result.body)
    path = TraceCheck(bed.wait_for_trace(result)).request_path(bed.mode)
    assert result.headers["x-gateway-destination-endpoint-served"] == path.decision.attributes["least_loaded.endpoint"]
    assert epp_image in bed.processes()["epp"].image  # its own image ran, not a process of this host
