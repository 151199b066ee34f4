"""Servers you run, given by URL, behind the kit's pickers: llm-d-inference-sim processes the test
starts itself (as a user would start vLLM) stand for them. Envoy's pool and the picker get exactly
those servers; the trace check waits for the kit's own spans only; pd puts the kit's pd-sidecar in
front of each decoder; and the ttft flow refuses servers whose output does not follow the seed.
"""

from __future__ import annotations

import pytest
from eppkit.observability.contract import Epp, Pd, Service
from eppkit.services.vllm.config import MockLatency

from eppkit import TraceCheck, modes
from eppkit.backends import Backend, inference_sim
from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess
from eppkit.components.readiness import HttpReady
from eppkit.pytest_plugin.session import require_simulator
from eppkit.topology import Topology
from tests.support.contract import CONTRACT

pytestmark = pytest.mark.e2e

MODEL = "my-model"  # not the mock's name: the kit must take it from the server
LATENCY = MockLatency(time_to_first_token=20, inter_token_latency=2)


@pytest.fixture
def start_sim(tmp_path, eppkit_runtime):
    """Start one simulator as "your server": ``start_sim(name, fixed_text=True)`` -> its URL spec."""
    require_simulator()
    binary = inference_sim.find()
    started: list[ManagedProcess] = []
    ports = PortAllocator()

    def start(name: str, *, fixed_text: bool = True) -> str:
        port = ports.port(all_interfaces=True)
        if fixed_text:
            argv = inference_sim.command(binary, port=port, model=MODEL, seed=len(started), latency=LATENCY)
        else:  # its own random text from a process-wide RNG: what the ttft flow must refuse
            argv = [str(binary), "--port", str(port), "--model", MODEL, "--force-dummy-tokenizer",
                    "--seed", str(len(started)), *inference_sim.latency_flags(LATENCY)]
        proc = ManagedProcess(name, argv, tmp_path / f"{name}.log").with_env(**inference_sim.env(name)).start()
        started.append(proc)
        proc.wait_ready(HttpReady(f"http://127.0.0.1:{port}{inference_sim.READY_PATH}", timeout_s=15))
        return f"{name}=http://localhost:{port}"  # a host name: the kit resolves it for Envoy

    yield start
    for proc in started:
        proc.stop()
    ports.release()


def chat(bed, **extra):
    body = {"model": MODEL, "max_tokens": 6, "messages": [{"role": "user", "content": "Who serves me?"}], **extra}
    client = bed.client()
    result = client.chat(body)
    client.flush()
    return result


@CONTRACT  # servers of the host reached from the runtime (host networking)
def test_servers_given_by_url_are_the_pool_and_the_pick_is_who_serves(eppkit_testbed_factory, start_sim):
    urls = (start_sim("sim-a"), start_sim("sim-b"))
    bed = eppkit_testbed_factory(Topology(mode="ext_proc", backend=Backend(urls=urls),
                                          options={"scorer": "round-robin"}))
    assert [(ep.name, ep.model) for ep in bed.backends] == [("sim-a", MODEL), ("sim-b", MODEL)]
    assert not [name for name in bed.services if name.startswith("vllm")]  # no mock started
    served = set()
    for _ in range(4):
        result = chat(bed)
        assert result.status == 200, result.body
        trace = bed.wait_for_trace(result)  # the kit's spans only: the simulator traces nothing
        check = TraceCheck(trace)
        pick = check.one(Epp.PICK)
        picked = pick.attributes[Epp.ENDPOINT_NAME]
        assert result.headers["x-inference-pod"] == picked
        check.before(pick, check.one(modes.get("ext_proc").upstream, Service.ENVOY))
        served.add(picked)
    assert served == {"sim-a", "sim-b"}  # round robin over exactly the servers given


def test_pd_puts_the_kits_sidecar_in_front_of_each_decoder_given_by_url(eppkit_testbed_factory, start_sim):
    backend = Backend(prefill_urls=(start_sim("sim-p"),), decode_urls=(start_sim("sim-d"),))
    bed = eppkit_testbed_factory(Topology(mode="sidecar", flow="pd", backend=backend))
    assert [name for name in bed.services if not name.startswith(("frontend", "epp"))] == ["pd-sidecar-0"]
    result = chat(bed, stream=True)
    assert result.status == 200 and result.text == "t0 t1 t2 t3 t4 t5 ", result.body
    assert result.headers["x-inference-pod"] == "sim-d"
    check = TraceCheck(bed.wait_for_trace(result))
    check.before(check.one(Pd.PREFILL), check.one(Pd.DECODE))


def test_ttft_refuses_servers_whose_text_ignores_the_seed(eppkit_testbed_factory, start_sim):
    backend = Backend(prefill_urls=(start_sim("sim-p", fixed_text=False),),
                      decode_urls=(start_sim("sim-d", fixed_text=False),))
    with pytest.raises(ValueError, match="follows the request's seed.*garbled"):
        eppkit_testbed_factory(Topology(mode="ext_proc", flow="ttft", backend=backend))
