"""A picker's pool learned from Kubernetes, as GAIE's EPP learns it: an InferencePool and the Pods it selects.

``--kubeconfig K --pool-namespace NS --pool-name NAME`` (the GAIE EPP's flag names) replace ``--endpoints``:
the pool's endpoints are every Pod in NS whose labels match the InferencePool's selector, that is Ready and
has an IP, on each of the pool's target ports. A Pod that turns not Ready, is deleted or stops matching
leaves the pool at once (its load figures with it); one that appears joins it and is scraped from the next
round. The endpoint's name is the Pod's (``<pod>-<rank>`` when the pool has several target ports).

The state is read with one list of each kind, then kept with a watch from that list's resourceVersion
(lightkube, reconnecting on errors). :meth:`KubePool.start` returns after the first list, so a picker
that starts after it already knows the whole pool.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.pool import Pool

from eppkit.core.tasks import stop_tasks

log = logging.getLogger("picker.kube_pool")
# lightkube's HTTP client logs every request at INFO, watches included: one line per event.
logging.getLogger("httpx2").setLevel(logging.WARNING)

KIND, PLURAL = "InferencePool", "inferencepools"
# The InferencePool's API group (GAIE's --pool-group) and the version served in it.
VERSIONS = {"inference.networking.k8s.io": "v1", "inference.networking.x-k8s.io": "v1alpha2"}
DEFAULT_GROUP = "inference.networking.k8s.io"


def _get(obj: Any, *path: str) -> Any:
    """``obj.a.b`` or ``obj["a"]["b"]`` (lightkube's models and generic resources' dicts), None when absent."""
    for key in path:
        if obj is None:
            return None
        obj = obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
    return obj


def pod_ready(pod: Any) -> bool:
    return any(_get(c, "type") == "Ready" and _get(c, "status") == "True"
               for c in (_get(pod, "status", "conditions") or []))


def endpoints_for(pool_spec: dict | None, pods: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(name, ip, port) of every endpoint: Ready pods the selector matches, on each target port."""
    if not pool_spec:
        return []
    selector = (pool_spec.get("selector") or {}).get("matchLabels") or {}
    ports = [int(p["number"]) for p in pool_spec.get("targetPorts") or []]
    found = []
    for name in sorted(pods):
        pod = pods[name]
        labels = _get(pod, "metadata", "labels") or {}
        ip = _get(pod, "status", "podIP")
        if not ip or not pod_ready(pod) or not selector.items() <= labels.items():
            continue
        for rank, port in enumerate(ports):
            found.append((name if len(ports) == 1 else f"{name}-{rank}", ip, port))
    return found


class KubePool:
    """Keeps ``pool.endpoints`` equal to what the InferencePool selects (see the module docstring)."""

    def __init__(self, pool: Pool, kubeconfig: str, namespace: str, name: str, group: str = DEFAULT_GROUP) -> None:
        if group not in VERSIONS:
            raise ValueError(f"--pool-group {group}: one of {', '.join(VERSIONS)}")
        self.pool = pool
        self.kubeconfig, self.namespace, self.name, self.group = kubeconfig, namespace, name, group
        self.spec: dict | None = None
        self.pods: dict[str, Any] = {}
        self._client = None
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        from lightkube import AsyncClient, KubeConfig
        from lightkube.generic_resource import create_namespaced_resource
        from lightkube.resources.core_v1 import Pod

        self._client = AsyncClient(KubeConfig.from_file(self.kubeconfig), namespace=self.namespace, trust_env=False)
        pool_kind = create_namespaced_resource(self.group, VERSIONS[self.group], KIND, PLURAL)
        selects_ours = {"metadata.name": self.name}
        pools = self._client.list(pool_kind, fields=selects_ours)
        try:
            async for obj in pools:
                self.spec = dict(_get(obj, "spec") or {})
        except Exception as exc:  # lightkube's ApiError, or the HTTP client's own error for a 404 without a Status
            status = getattr(getattr(exc, "status", None), "code", None) or getattr(
                getattr(exc, "response", None), "status_code", None)
            if status != 404:
                raise
            # controller-runtime's words, so whoever reads EPP logs finds it the same way for every EPP
            log.error('no matches for kind "%s" in version "%s/%s": the cluster has no CRD for it',
                      KIND, self.group, VERSIONS[self.group])
            raise SystemExit(1) from None
        pods = self._client.list(Pod)
        async for pod in pods:
            self.pods[_get(pod, "metadata", "name")] = pod
        if self.spec is None:
            log.warning("no InferencePool %s in namespace %s (yet): the pool is empty", self.name, self.namespace)
        self._apply()
        self._tasks = [
            asyncio.create_task(self._watch(pool_kind, pools.resourceVersion, self._on_pool, fields=selects_ours),
                                name="kube-pool-watch"),
            asyncio.create_task(self._watch(Pod, pods.resourceVersion, self._on_pod), name="kube-pods-watch"),
        ]

    async def stop(self) -> None:
        await stop_tasks(*self._tasks)  # a watch that had ended is no news at the end
        self._tasks = []
        if self._client is not None:
            await self._client.close()

    async def _watch(self, kind, resource_version: str, handle, **selectors) -> None:
        from lightkube.types import on_error_retry

        async for event, obj in self._client.watch(kind, resource_version=resource_version, on_error=on_error_retry,
                                                   **selectors):
            handle(event, obj)
            self._apply()

    def _on_pool(self, event: str, obj: Any) -> None:
        self.spec = None if event == "DELETED" else dict(_get(obj, "spec") or {})

    def _on_pod(self, event: str, obj: Any) -> None:
        if event == "DELETED":
            self.pods.pop(_get(obj, "metadata", "name"), None)
        else:
            self.pods[_get(obj, "metadata", "name")] = obj

    def _apply(self) -> None:
        """The pool's endpoints as the objects say, keeping the known ones (and their load figures)."""
        wanted = endpoints_for(self.spec, self.pods)
        known = {(ep.name, ep.host, ep.port): ep for ep in self.pool.endpoints}
        endpoints = [known.get(key) or PoolEndpoint(*key) for key in wanted]
        before = {ep.name for ep in self.pool.endpoints}
        after = {ep.name for ep in endpoints}
        if before != after or len(endpoints) != len(self.pool.endpoints):
            log.info("pool %s/%s: %d endpoints (joined: %s; left: %s)", self.namespace, self.name, len(endpoints),
                     ", ".join(sorted(after - before)) or "none", ", ".join(sorted(before - after)) or "none")
        self.pool.endpoints = endpoints
