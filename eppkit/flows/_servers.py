"""What the flows share: one inference server of the topology's backend, and pods on their own addresses."""

from __future__ import annotations

from eppkit.backends import MOCK, Server
from eppkit.components.inference_pool import LOOPBACK_PODS
from eppkit.components.ports import PortAllocator
from eppkit.flows.registry import FlowPlan
from eppkit.plan import Endpoint, ServiceSpec
from eppkit.services.openai_server.kvevents import KvEventsConfig
from eppkit.topology import Topology


def instance(topology: Topology, ports: PortAllocator, name: str, role: str, model: str,
             extra: list[str], host: str = "127.0.0.1", port: int | None = None,
             index: int = 0) -> tuple[ServiceSpec, Endpoint]:
    """One vLLM the kit starts: the backend's server (its mock, or a preset such as llm-d-inference-sim or a real
    vLLM: eppkit.backends.registry).
    ``host``/``port``: a pod address of its own (modes whose EPP sees an InferencePool); ``index``: its place
    among the topology's vLLMs."""
    backend = topology.backend
    if backend.entry.all_interfaces:  # never on a pod address of its own (Backend.validate refuses that)
        port = ports.port(all_interfaces=True)  # its port must be free on every interface, not only on loopback
    else:
        port = port or ports.port()
    kv_events = None
    if topology.publishes_kv_events:
        if backend.preset != MOCK or not backend.starts_servers:
            raise ValueError(f"KV-cache events: the kit's mock publishes them; the {backend.label} backend is not "
                             "started with them (leave kv_events off and pick another scorer)")
        kv_events = f"tcp://{host.split(',')[0]}:{ports.port()}"
        extra = [*extra, "--kv-events-config", KvEventsConfig.flag(kv_events, f"kv@{name}@{model}")]
    spec = backend.server(Server(name, role, model, host, port, index, topology.seed, topology.latency, tuple(extra),
                                 backend.command))
    return spec, Endpoint(name, host, port, role, model, kv_events=kv_events)


def pool(topology: Topology, ports: PortAllocator, pod_addresses) -> FlowPlan:
    """The topology's vLLMs (role both) as one pool Envoy routes to; servers given by URL start nothing.

    With pod addresses (True: loopback ones; or where the runtime puts pods, such as
    :class:`eppkit.cluster.podnet.BlockPods`) each vLLM is a pod on its own address, all on one port; ``pods_per_mock``
    pods share one mock process (its instance is its first pod's name)."""
    out = FlowPlan()
    backend = topology.backend
    if backend.running:  # the preset's servers, already started and shared (eppkit.runtimes.vllm_servers)
        out.routable = backend.running_endpoints()
        return out
    if not backend.starts_servers:  # servers you run, by URL
        out.routable = backend.endpoints("both")
        return out
    if topology.pods_per_mock < 1:
        raise ValueError("pods_per_mock must be at least 1")
    if topology.pods_per_mock > 1 and backend.entry.one_per_pod:
        raise ValueError(backend.entry.one_per_pod)
    backend.entry.check_pool(backend, len(topology.vllm))
    if not pod_addresses:
        for i, spec in enumerate(topology.vllm):
            service, endpoint = instance(topology, ports, spec.name, spec.role, spec.model, spec.extra_args, index=i)
            out.services.append(service)
            out.routable.append(endpoint)
        return out
    addresses = pod_addresses if hasattr(pod_addresses, "address") else LOOPBACK_PODS  # True: loopback
    hosts = [addresses.address(i) for i in range(len(topology.vllm))]
    shared = addresses.shared_port(ports, hosts)
    per = topology.pods_per_mock
    for start in range(0, len(topology.vllm), per):
        group, group_hosts = topology.vllm[start:start + per], hosts[start:start + per]
        first = group[0]
        if per > 1 and len({(s.role, s.model, tuple(s.extra_args)) for s in group}) > 1:
            raise ValueError(f"pods served by one mock share its role, model and flags: {[s.name for s in group]}")
        service, mock = instance(topology, ports, first.name, first.role, first.model, first.extra_args,
                                 host=",".join(group_hosts), port=shared, index=start)
        out.services.append(service)
        for spec, host in zip(group, group_hosts):
            out.routable.append(Endpoint(spec.name, host, shared, spec.role, spec.model, kv_events=mock.kv_events))
            if spec.name != service.name:
                out.servers[spec.name] = service.name
    return out
