"""One InferencePool and its Pods in one namespace of an API server (:class:`~eppkit.components.kubeapi.ApiServer`:
the kit's control plane, or a cluster's).

Written as a cluster's controllers would write them: the pool (``inference.networking.k8s.io/v1``: its
selector, target ports and EPP), each Pod created, then its status written through ``pods/status``: phase
Running, ``podIP``, the Ready condition. There is no kubelet, scheduler or controller-manager, so nothing
else ever touches that status, and an EPP sees exactly what a test wrote. What an EPP reads of a Pod is its
labels (against the pool's selector), its Ready condition and its IP.

Pod addresses are loopback addresses (Linux routes all of 127.0.0.0/8 to ``lo``): each pod's server
listens on its own address, all on the pool's target port, as the pods of an InferencePool do.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

from eppkit.components.controlplane import ControlPlaneError
from eppkit.services.picker.saturation import OBJECTIVE_GROUP, OBJECTIVE_KIND, OBJECTIVE_PLURAL, OBJECTIVE_VERSION

if TYPE_CHECKING:
    from eppkit.components.kubeapi import ApiServer

GROUP, VERSION, KIND, PLURAL = "inference.networking.k8s.io", "v1", "InferencePool", "inferencepools"
POOL_CRD = f"{PLURAL}.{GROUP}"
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
DEFAULT_SELECTOR = {"app": "vllm"}
NODE = "eppkit-node"  # spec.nodeName: the pods look scheduled (nothing runs there)
BULK_CONCURRENCY = 16  # concurrent creates past which the API server (CPU-bound on 2 cores) gains nothing


def pod_address(index: int) -> str:
    """The loopback address of pod ``index``: 127.0.0.2, 127.0.0.3, ... 127.0.0.255, 127.0.1.0, ..."""
    n = index + 2
    if not 0 <= index < (1 << 24) - 2:
        raise ValueError(f"pod index {index} has no address in 127.0.0.0/8")
    return f"127.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def check_pod_ip(ip: str) -> str:
    """``ip`` when it is a loopback address; ValueError saying why a pod cannot have it otherwise."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        raise ValueError(f"pod address {ip!r} is not an IP address") from None
    if address not in LOOPBACK:
        raise ValueError(f"pod address {ip} is outside 127.0.0.0/8: the kit's pods are loopback addresses of this "
                         "machine, where their servers listen (all traffic stays on 127.0.0.1/8). "
                         "Use an address such as 127.0.0.2, or leave it out and the kit picks the next free one.")
    return ip


class LoopbackPods:
    """Where a testbed's pods are: loopback addresses of this machine (every runtime but kubernetes, whose pool Pods
    are on its pod network: :class:`eppkit.cluster.podnet.BlockPods`)."""

    learned = False  # each address planned before its pod starts (eppkit.cluster.remote.LearnedPods: not)

    def address(self, index: int) -> str:
        return pod_address(index)

    def check(self, ip: str) -> str:
        return check_pod_ip(ip)

    def shared_port(self, ports, hosts: list[str]) -> int:
        """One port free on every address of ``hosts`` (they are this machine's)."""
        return ports.shared_port(hosts)


LOOPBACK_PODS = LoopbackPods()
READY_GATE = "eppkit.io/ready"  # the readiness gate of a real pool Pod: what set_ready writes (InferencePoolObjects)
MEMBER_LABEL = "eppkit.pool-member"  # a real Pod of the pool (the namespace also holds the testbed's other Pods)


@dataclass(frozen=True)
class PodState:
    name: str
    ip: str
    ready: bool
    labels: dict[str, str] = field(default_factory=dict)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_patch(ip: str, ready: bool) -> dict:
    """What a kubelet would write: Running, the pod's IP, and the Ready / ContainersReady conditions."""
    state = "True" if ready else "False"
    now = _now()
    return {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1",
                       "conditions": [{"type": kind, "status": state, "lastTransitionTime": now}
                                      for kind in ("Ready", "ContainersReady")]}}


def pod_manifest(name: str, namespace: str, labels: dict[str, str], port: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"nodeName": NODE, "containers": [{"name": "vllm", "image": "eppkit/mock-vllm",
                                                       "ports": [{"containerPort": port}]}]}}


def _state(pod) -> PodState:
    status = pod.status
    conditions = (status.conditions or []) if status else []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return PodState(pod.metadata.name, (status.podIP if status else None) or "", ready, dict(pod.metadata.labels or {}))


def _objective_resource():
    from lightkube.generic_resource import create_namespaced_resource

    return create_namespaced_resource(OBJECTIVE_GROUP, OBJECTIVE_VERSION, OBJECTIVE_KIND, OBJECTIVE_PLURAL)


def _pool_resource():
    from lightkube.generic_resource import create_namespaced_resource

    return create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)


class InferencePoolObjects:
    """The API objects of one pool: ``create`` it with its pods, then change it as a test needs."""

    def __init__(self, plane: "ApiServer", namespace: str, name: str = "vllm-pool",
                 selector: dict[str, str] | None = None, *, real_pods: bool = False) -> None:
        self.plane = plane
        self.namespace = namespace
        self.name = name
        self.selector = dict(selector or DEFAULT_SELECTOR)
        # real_pods: each pod is a Pod a kubelet runs (the kubernetes runtime), made by the testbed before it joins
        # the pool here: its labels written, and its Ready condition its kubelet's, through a readiness gate
        # (READY_GATE) this writes; never a Pod object made or a status written in the kubelet's place.
        self.real_pods = real_pods
        self._labels: dict[str, dict[str, str] | None] = {}  # a real pod's own labels (None: the pool's)
        self._client = plane.client(namespace)
        self._pool = _pool_resource()

    def close(self) -> None:
        self._client.close()

    def _fail(self, what: str, exc) -> ControlPlaneError:
        message = getattr(getattr(exc, "status", None), "message", None) or str(exc)
        return ControlPlaneError(f"{what} in namespace {self.namespace}: {message}")

    def require_crd(self) -> None:
        """ControlPlaneError unless the control plane serves InferencePool (the CRD every pool EPP watches)."""
        from lightkube import ApiError
        from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

        try:
            self._client.get(CustomResourceDefinition, POOL_CRD)
        except ApiError as exc:
            if exc.status.code != 404:
                raise self._fail(f"reading CRD {POOL_CRD}", exc) from None
            raise ControlPlaneError(
                f"the control plane has no CRD {POOL_CRD}: it cannot hold an InferencePool ({GROUP}/{VERSION}), "
                "which the EPP watches.\nHint: the kit installs GAIE's CRDs from its cache "
                "(`python -m eppkit.builds.controlplane --force` fetches them again).") from None

    def create(self, target_ports: Sequence[int], epp_port: int, pods: Iterable[tuple[str, str]] = (), *,
               ready: bool = True) -> None:
        """The pool (its EPP on ``epp_port``) and one Ready pod per ``(name, ip)``."""
        from lightkube import ApiError

        self.require_crd()
        pods = [(name, ip if self.real_pods else check_pod_ip(ip)) for name, ip in pods]
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"selector": {"matchLabels": self.selector},
                         "targetPorts": [{"number": int(p)} for p in target_ports],
                         "endpointPickerRef": {"name": f"{self.name}-epp", "port": {"number": int(epp_port)},
                                               "failureMode": "FailClose"}}}
        try:
            self._client.create(self._pool.from_dict(body))
        except ApiError as exc:
            raise self._fail(f"the API server refused InferencePool {self.name}", exc) from None
        if len(pods) > BULK_CONCURRENCY and not self.real_pods:
            asyncio.run(self._add_many(pods, target_ports[0], ready))
        else:
            for name, ip in pods:
                self.add_pod(name, ip, ready=ready, port=target_ports[0])

    def add_objective(self, name: str, priority: int) -> None:
        """An InferenceObjective of this pool (``spec.poolRef`` names it) with ``priority``."""
        from lightkube import ApiError

        body = {"apiVersion": f"{OBJECTIVE_GROUP}/{OBJECTIVE_VERSION}", "kind": OBJECTIVE_KIND,
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"priority": int(priority), "poolRef": {"group": GROUP, "name": self.name}}}
        try:
            self._client.create(_objective_resource().from_dict(body))
        except ApiError as exc:
            raise self._fail(f"the API server refused InferenceObjective {name}", exc) from None

    async def _add_many(self, pods: list[tuple[str, str]], port: int, ready: bool) -> None:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod
        from lightkube.types import PatchType

        client = self.plane.async_client(self.namespace)
        gate = asyncio.Semaphore(BULK_CONCURRENCY)

        async def one(name: str, ip: str) -> None:
            async with gate:
                await client.create(Pod.from_dict(pod_manifest(name, self.namespace, self.selector, port)))
                await client.patch(Pod.Status, name, status_patch(ip, ready), patch_type=PatchType.MERGE)

        try:
            await asyncio.gather(*(one(name, ip) for name, ip in pods))
        except ApiError as exc:
            raise self._fail("the API server refused a pod", exc) from None
        finally:
            await client.close()

    def add_pod(self, name: str, ip: str, *, ready: bool = True, labels: dict[str, str] | None = None,
                port: int | None = None) -> None:
        """A Pod with the pool's labels (or ``labels``), then its status: ``ip``, Ready or not. A real pod is
        there already: its labels are written, then its gate, and this returns once its kubelet agrees."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod
        from lightkube.types import PatchType

        if self.real_pods:
            self._labels[name] = dict(labels) if labels else None
            self._join(name)
            self.set_ready(name, ready)
            return
        check_pod_ip(ip)
        port = port or self.target_ports()[0]
        try:
            self._client.create(Pod.from_dict(pod_manifest(name, self.namespace, labels or self.selector, port)))
            self._client.patch(Pod.Status, name, status_patch(ip, ready), patch_type=PatchType.MERGE)
        except ApiError as exc:
            raise self._fail(f"the API server refused pod {name}", exc) from None

    def set_ready(self, name: str, ready: bool) -> None:
        """Write the pod's Ready condition (what a kubelet's readiness probe would). A real pod: its readiness
        gate, then until its kubelet has made Ready agree (a pod started again gets the pool's labels back)."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod
        from lightkube.types import PatchType

        if self.real_pods:
            # Not Ready, and gone: killed through its API server alone (a cluster of your own: kill deletes the Pod
            # at once), which its EPP sees in place of not Ready.
            if not self._join(name, gone_ok=not ready):
                return
            condition = {"type": READY_GATE, "status": "True" if ready else "False", "lastTransitionTime": _now()}
            try:
                self._client.patch(Pod.Status, name, {"status": {"conditions": [condition]}},
                                   patch_type=PatchType.STRATEGIC)
            except ApiError as exc:
                raise self._fail(f"cannot set pod {name} ready={ready}", exc) from None
            self._until_ready(name, ready)
            return
        ip = self.pod(name).ip
        try:
            self._client.patch(Pod.Status, name, status_patch(ip, ready), patch_type=PatchType.MERGE)
        except ApiError as exc:
            raise self._fail(f"cannot set pod {name} ready={ready}", exc) from None

    def _join(self, name: str, *, gone_ok: bool = False) -> bool:
        """A real pod's labels: the pool's (or its own), and the member label, unless it has them. False when the
        Pod is gone and ``gone_ok`` (else that is a ControlPlaneError)."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod
        from lightkube.types import PatchType

        wanted = {**(self._labels.get(name) or self.selector), MEMBER_LABEL: "true"}
        try:
            have = self._client.get(Pod, name).metadata.labels or {}
            if wanted.items() - have.items():
                self._client.patch(Pod, name, {"metadata": {"labels": wanted}}, patch_type=PatchType.MERGE)
        except ApiError as exc:
            if gone_ok and exc.status.code == 404:
                return False
            raise self._fail(f"cannot label pod {name}", exc) from None
        return True

    def _until_ready(self, name: str, ready: bool, timeout_s: float = 20.0) -> None:
        """Until the kubelet has Ready as ``ready`` (its probe and the gate; a second or so)."""
        import time

        deadline, last = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            last = self.pod(name)
            if last.ready == ready:
                return
            time.sleep(0.05)
        raise ControlPlaneError(f"pod {name} in namespace {self.namespace} not {'Ready' if ready else 'unready'} "
                                f"within {timeout_s:g} s of its gate set (its IP {last.ip if last else '?'}); "
                                f"`kubectl describe pod {name} -n {self.namespace}` shows its probe's failures")

    def delete_pod(self, name: str) -> None:
        """Remove the pod at once (grace period 0: no kubelet would ever confirm a graceful end)."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod

        try:
            self._client.delete(Pod, name, grace_period=0)
        except ApiError as exc:
            raise self._fail(f"cannot delete pod {name}", exc) from None

    def edit(self, *, target_ports: Sequence[int] | None = None, selector: dict[str, str] | None = None) -> None:
        """Change the pool's target ports and/or selector (the selector is replaced, not merged)."""
        from lightkube import ApiError
        from lightkube.types import PatchType

        spec: dict = {}
        if target_ports is not None:
            spec["targetPorts"] = [{"number": int(p)} for p in target_ports]
        if selector is not None:
            old = self.pool_spec()["selector"].get("matchLabels", {})
            spec["selector"] = {"matchLabels": {**{k: None for k in old}, **selector}}
        if not spec:
            return
        try:
            self._client.patch(self._pool, self.name, {"spec": spec}, patch_type=PatchType.MERGE)
        except ApiError as exc:
            raise self._fail(f"the API server refused the change of InferencePool {self.name}", exc) from None
        if selector is not None:
            self.selector = dict(selector)

    def pool_spec(self) -> dict:
        spec = self._client.get(self._pool, self.name).spec
        return dict(spec) if not isinstance(spec, dict) else spec

    def target_ports(self) -> list[int]:
        return [int(p["number"]) for p in self.pool_spec()["targetPorts"]]

    def pods(self) -> list[PodState]:
        """Every pod of the namespace, in name order, whether the pool's selector matches it or not (real pods: every
        pod that joined the pool; the testbed's other Pods share the namespace)."""
        from lightkube.resources.core_v1 import Pod

        found = self._client.list(Pod, labels={MEMBER_LABEL: "true"}) if self.real_pods else self._client.list(Pod)
        return sorted((_state(pod) for pod in found), key=lambda p: p.name)

    def pod(self, name: str) -> PodState:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod

        try:
            return _state(self._client.get(Pod, name))
        except ApiError as exc:
            raise self._fail(f"no pod {name}", exc) from None

    def delete_all(self) -> None:
        """The pool and every pod of the namespace (a testbed's teardown on a shared control plane)."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod

        try:
            self._client.delete(self._pool, self.name)
            self._client.deletecollection(_objective_resource())
            if not self.real_pods:  # real pods are the testbed's to stop
                self._client.deletecollection(Pod, grace_period=0)
        except ApiError:
            pass  # gone already, or the control plane is stopping: nothing of it outlives the session
