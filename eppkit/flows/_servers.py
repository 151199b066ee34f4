"""What the flows share: one inference server of the topology's backend, and pods on their own addresses."""

from __future__ import annotations

from eppkit.backends import SIM, URLS, inference_sim
from eppkit.components.inference_pool import pod_address
from eppkit.components.ports import PortAllocator
from eppkit.flows.registry import FlowPlan
from eppkit.plan import Endpoint, ServiceSpec
from eppkit.topology import Topology


def pod_hosts(n: int) -> list[str]:
    """One loopback address per pod, 127.0.0.2 upwards (Linux routes all of 127/8 to lo)."""
    return [pod_address(i) for i in range(n)]


def _vllm_args(topology: Topology, name: str, role: str, model: str, extra: list[str]) -> list[str]:
    return ["--role", role, "--instance", name, "--served-model-name", model, *topology.latency.args(),
            "--seed", str(topology.seed), *extra]


def instance(topology: Topology, ports: PortAllocator, name: str, role: str, model: str,
             extra: list[str], host: str = "127.0.0.1", port: int | None = None) -> tuple[ServiceSpec, Endpoint]:
    """One vLLM the kit starts: its mock, or the llm-d-inference-sim preset in its place.
    ``host``/``port``: a pod address of its own (modes whose EPP sees an InferencePool)."""
    if topology.backend.kind == SIM:
        if host != "127.0.0.1":
            raise ValueError(f"the {topology.mode} mode puts each pod on its own loopback address, and "
                             f"{inference_sim.NAME} binds every interface: use the kit's mocks there")
        # It binds every interface: its port must be free there too, not only on loopback.
        port = ports.port(all_interfaces=True)
        argv = inference_sim.command(inference_sim.require_binary(), port=port, model=model, seed=topology.seed,
                                     latency=topology.latency, extra=extra)
        spec = ServiceSpec(name, inference_sim.NAME, port, health_path=inference_sim.READY_PATH,
                           env=inference_sim.env(name), argv=argv)
    else:
        port = port or ports.port()
        spec = ServiceSpec(name, "eppkit.services.vllm", port, _vllm_args(topology, name, role, model, extra),
                           host=host)
    return spec, Endpoint(name, host, port, role, model)


def pool(topology: Topology, ports: PortAllocator, pod_addresses: bool) -> FlowPlan:
    """The topology's vLLMs (role both) as one pool Envoy routes to; servers given by URL start nothing."""
    out = FlowPlan()
    if topology.backend.kind == URLS:
        out.routable = topology.backend.endpoints("both")
        return out
    hosts = pod_hosts(len(topology.vllm)) if pod_addresses else None
    shared = ports.shared_port(hosts) if hosts else None
    for i, spec in enumerate(topology.vllm):
        host, port = (hosts[i], shared) if hosts else ("127.0.0.1", None)
        service, endpoint = instance(topology, ports, spec.name, spec.role, spec.model, spec.extra_args,
                                     host=host, port=port)
        out.services.append(service)
        out.routable.append(endpoint)
    return out
