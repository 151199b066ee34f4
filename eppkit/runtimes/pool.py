"""A testbed's InferencePool, to change while requests flow: ``bed.pool`` in a mode whose EPP watches one.

The pool lives in the testbed's namespace of a Kubernetes control plane (the session's, or the testbed's own:
:mod:`eppkit.components.controlplane`); each mock vLLM is one of its Pods, on its own loopback address, all on
the pool's target port. A test changes it the way a cluster would, and each call returns once the change is
written and Envoy has the pool's endpoints (the testbed is the gateway's controller: :mod:`eppkit.gateway.eds`):

    bed.pool.add_pod()                         # a new mock on the next loopback address, then its Pod, Ready
    bed.pool.set_ready("vllm-0", False)        # what a failing readiness probe writes; its mock keeps running
    bed.pool.set_ready("vllm-0", False, stop_server=True)   # its mock killed, then not Ready (a crashed pod)
    bed.pool.set_ready("vllm-0", True)         # its mock started again if it was stopped, then Ready
    bed.pool.remove_pod("vllm-1")              # Envoy drops it, the Pod deleted, then its mock stopped
    bed.pool.edit(target_ports=[...], selector={...})
    bed.pool.roll(drain_s=0.5)                 # a rolling replacement of every pod, one at a time

How fast the EPP follows is what a test measures: nothing here waits for the EPP.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Protocol

from eppkit.components.controlplane import ControlPlane, ControlPlaneError
from eppkit.components.inference_pool import InferencePoolObjects, LoopbackPods, PodState
from eppkit.components.ports import PortAllocator
from eppkit.flows._servers import instance
from eppkit.gateway import eds
from eppkit.plan import Endpoint, PoolTarget
from eppkit.topology import Topology


class PoolBed(Protocol):
    """What the pool needs of its testbed: the topology and ports to make a pod's mock, the mocks it runs, the
    endpoints Envoy routes to, and Envoy's admin URL to wait on."""

    topology: Topology
    run_dir: Path
    ports: PortAllocator
    envoy_admin_url: str
    pod_addresses: LoopbackPods  # where its pods are (eppkit.components.inference_pool, eppkit.cluster.podnet)

    def envoy_running(self) -> bool: ...

    def start_backend(self, name: str, endpoint: Endpoint, spec) -> None:
        """Start ``spec`` (a mock) as the service ``name`` and route to ``endpoint`` in its place."""
        ...

    def service_running(self, name: str) -> bool: ...

    def stop_service(self, name: str, *, crash: bool) -> None: ...

    def forget_backend(self, service: str, pod: str) -> None:
        """The service (stopped) and the pod's endpoint are gone: its pod was deleted."""
        ...

    def envoy_files_changed(self, folder: Path) -> None:
        """Envoy's endpoint files in ``folder`` were rewritten (where Envoy reads a copy, it is brought up to date)."""
        ...


class InferencePoolHandle:
    """The pool's API objects, the mock behind each pod, and Envoy's view of the pool (see the module docstring)."""

    def __init__(self, bed: PoolBed, plane: ControlPlane, target: PoolTarget, *, shared: bool,
                 real_pods: bool = False) -> None:
        self._bed = bed
        self.plane = plane
        self.target = target
        self.shared = shared  # on a shared control plane the objects go when the testbed stops
        # real_pods: each mock is the Pod itself, run by a kubelet (the kubernetes runtime); else its Pod is an API
        # object whose status this writes.
        self.objects = InferencePoolObjects(plane, target.namespace, target.name, real_pods=real_pods)
        self.eds_dir = bed.run_dir / eds.FOLDER
        self._servers: dict[str, str] = {}  # pod -> the testbed service (mock) serving its address
        self._models: dict[str, str] = {}  # pod -> the model it serves (body routing's pools)
        self._clusters: dict[str, str | None] = {"picked": None}  # Envoy cluster -> the model it holds (None: all)
        self._version = 0
        self._next_index = 0

    # -- what the testbed does at start and stop -----------------------------------------------
    def create(self, backends: list[Endpoint], epp_port: int, pools: list[dict], servers: dict[str, str]) -> None:
        """The InferencePool on the backends' shared port, one Ready Pod per backend, Envoy's first endpoints.
        ``servers``: the mock serving a pod when it is not the pod's own (many pods per mock)."""
        ports = {ep.port for ep in backends}
        if len(ports) != 1:
            raise ValueError(f"the pods of an InferencePool share one target port; got {sorted(ports)}")
        for ep in backends:
            self._bed.pod_addresses.check(ep.host)
            self._servers[ep.name] = servers.get(ep.name, ep.name)
            self._models[ep.name] = ep.model
        self._clusters.update({pool["cluster"]: pool["model"] for pool in pools})
        self._next_index = len(backends)
        self.objects.create(sorted(ports), epp_port, [(ep.name, ep.host) for ep in backends])
        self.sync_envoy(wait=False)  # Envoy is not running yet: it reads the files at start

    def close(self) -> None:
        if self.shared:
            self.objects.delete_all()
        self.objects.close()

    # -- what a test does ---------------------------------------------------------------------
    def pods(self) -> list[PodState]:
        """Every pod of the testbed's namespace: name, IP, Ready, labels."""
        return self.objects.pods()

    def add_objective(self, name: str, priority: int) -> None:
        """An InferenceObjective of the pool with ``priority`` (a request names it in x-gateway-inference-objective)."""
        self.objects.add_objective(name, priority)

    def add_pod(self, name: str | None = None, *, ip: str | None = None, ready: bool = True,
                labels: dict[str, str] | None = None, model: str | None = None) -> PodState:
        """A new pod: its mock on ``ip`` (default: the next free loopback address) and the pool's target port,
        up and answering, then its Pod (the pool's labels unless ``labels``), Ready unless ``ready=False``."""
        taken = {p.name for p in self.pods()}
        if name is None:
            name = next(f"vllm-{i}" for i in range(self._next_index, self._next_index + 10_000)
                        if f"vllm-{i}" not in taken)
        elif name in taken:
            raise ValueError(f"pod {name} exists already in namespace {self.target.namespace}")
        addresses = self._bed.pod_addresses
        if ip is not None and addresses.learned:
            raise ValueError(f"pod {name}: on a cluster of your own a pod's address is where its network puts it: "
                             "leave ip out (the pod's IP is in bed.pool.pods() once it runs)")
        if ip is None:
            used = {p.ip for p in self.pods()}
            ip = next(a for i in range(self._next_index, self._next_index + 10_000)
                      if (a := addresses.address(i)) not in used)
        addresses.check(ip)
        self._next_index += 1
        model = model or self._bed.topology.vllm[0].model
        if model not in self._clusters.values() and any(m is not None for m in self._clusters.values()):
            raise ValueError(f"model {model!r} has no pool in this Envoy (body routing's pools are made at start: "
                             f"{', '.join(m for m in self._clusters.values() if m)})")
        self._start_server(name, ip, self.objects.target_ports()[0], model)
        self.objects.add_pod(name, ip, ready=ready, labels=labels)
        self._models[name] = model
        self.sync_envoy()
        return self.objects.pod(name)

    def remove_pod(self, name: str) -> None:
        """Take the pod out of Envoy's pool, delete it (at once), then stop its mock (if it serves only it).
        Envoy first, as a gateway drops a terminating endpoint: an EPP's late pick of it is then not in Envoy's
        pool and falls back, where a pick of a deleted Pod's address would wait out Envoy's connect timeout
        (on a pod network nothing refuses a connection to an address that left)."""
        self.sync_envoy(leaving=name)
        self.objects.delete_pod(name)
        self._stop_server(name, required=False)
        self._models.pop(name, None)

    def set_ready(self, name: str, ready: bool, *, stop_server: bool = False) -> None:
        """Write the pod's Ready condition. ``ready=False, stop_server=True`` kills its mock first (SIGKILL:
        requests in flight there break), then writes not Ready (a crash its readiness probe then notices);
        ``ready=True`` first starts its mock again if it was stopped."""
        pod = self.objects.pod(name)
        if ready and not self._serving(name):
            self._start_server(name, pod.ip, self.objects.target_ports()[0], self._models.get(name))
        if not ready and stop_server:
            self._stop_server(name, required=True, crash=True)
        self.objects.set_ready(name, ready)

    def edit(self, *, target_ports: list[int] | None = None, selector: dict[str, str] | None = None) -> None:
        """Change the InferencePool; Envoy then routes to the pods it selects, on its target ports."""
        self.objects.edit(target_ports=target_ports, selector=selector)
        self.sync_envoy()

    def roll(self, *, drain_s: float = 0.5) -> list[tuple[str, str]]:
        """Replace every pod, one at a time, as a Deployment's rolling update does (max surge 1, none
        unavailable): a new pod up and Ready, the old one not Ready, ``drain_s`` for its requests to end,
        then the old one removed. Returns (old, new) names."""
        replaced = []
        for old in [p.name for p in self.pods()]:
            new = self.add_pod()
            self.set_ready(old, False)
            time.sleep(drain_s)
            self.remove_pod(old)
            replaced.append((old, new.name))
        return replaced

    def endpoints(self, *, leaving: str | None = None) -> list[tuple[str, int]]:
        """What Envoy routes to: every pod the pool selects that has an IP (but ``leaving``), on each target port."""
        spec = self.objects.pool_spec()
        selector = spec["selector"].get("matchLabels", {})
        ports = [int(p["number"]) for p in spec["targetPorts"]]
        return [(pod.ip, port) for pod in self.pods()
                if pod.ip and pod.name != leaving and selector.items() <= pod.labels.items() for port in ports]

    def sync_envoy(self, *, wait: bool = True, leaving: str | None = None) -> None:
        """Write the pool's endpoints for Envoy (without the pod ``leaving``); with ``wait``, until Envoy's
        ``picked`` cluster holds them."""
        addresses = self.endpoints(leaving=leaving)
        by_ip = {pod.ip: pod.name for pod in self.pods()}
        self._version += 1
        clusters = {cluster: [a for a in addresses if model is None or self._models.get(by_ip.get(a[0])) == model]
                    for cluster, model in self._clusters.items()}
        eds.write(self.eds_dir, clusters, self._version)
        if self._bed.envoy_running():
            self._bed.envoy_files_changed(self.eds_dir)
        if wait and self._bed.envoy_running():
            eds.wait_applied(self._bed.envoy_admin_url, "picked", addresses)

    # -- the mocks behind the pods --------------------------------------------------------------
    def _serving(self, pod: str) -> bool:
        return self._bed.service_running(self._servers.get(pod, ""))

    def _start_server(self, pod: str, ip: str, port: int, model: str | None) -> None:
        bed = self._bed
        if bed.pod_addresses.learned:  # started again: wherever its network puts it now
            ip = bed.pod_addresses.address(0)
        spec, endpoint = instance(bed.topology, bed.ports, pod, "both", model or bed.topology.vllm[0].model,
                                  list(bed.topology.vllm[0].extra_args), host=ip, port=port)
        bed.start_backend(pod, endpoint, spec)
        self._servers[pod] = pod

    def _stop_server(self, pod: str, *, required: bool, crash: bool = False) -> None:
        service = self._servers.get(pod)
        shared = [p for p, s in self._servers.items() if s == service and p != pod]
        if service is None or shared:
            if required:
                raise ValueError(f"pod {pod}'s address is served by {service}, which also serves {', '.join(shared)}: "
                                 "it cannot stop for one pod")
            self._servers.pop(pod, None)
            return
        self._bed.stop_service(service, crash=crash)
        if not required:
            self._servers.pop(pod, None)
            self._bed.forget_backend(service, pod)


def missing_kind(exc: Exception, log: str, pool: InferencePoolHandle | None, run_dir: Path) -> Exception:
    """An EPP that never got ready (``exc``; ``log``: its log) because the control plane has no CRD for a kind it
    watches: an error saying which; else ``exc``."""
    found = re.search(r'no matches for kind \\?"(\w+)\\?" in version \\?"([\w./-]+)\\?"', log)
    if found is None or pool is None:
        return exc
    kind, version = found.groups()
    served = ", ".join(pool.plane.served_crds())
    return ControlPlaneError(
        f"the EPP watches {kind} ({version}), but the control plane has no CRD for it (it serves {served}).\n"
        f"Hint: check the EPP's flags (e.g. --pool-group), or give the CRD's manifest: the external-epp option "
        f"crds=[file]. Its log: {run_dir / 'epp.log'}.")
