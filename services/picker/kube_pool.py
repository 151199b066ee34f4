"""A picker's pool learned from Kubernetes, as GAIE's EPP learns it: an InferencePool and the Pods it selects.

``--kubeconfig K --pool-namespace NS --pool-name NAME`` (the GAIE EPP's flag names) replace ``--endpoints``:
the pool's endpoints are every Pod in NS whose labels match the InferencePool's selector, that is Ready and
has an IP, on each of the pool's target ports. A Pod that turns not Ready, is deleted or stops matching
leaves the pool at once (its load figures with it); one that appears joins it and is scraped from the next
round. The endpoint's name is the Pod's (``<pod>-<rank>`` when the pool has several target ports).

The state is read with one list of each kind, then kept with a watch from that list's resourceVersion
(:mod:`.kube_watch`). :meth:`KubePool.start` returns after the first list, so a picker that starts after it
already knows the whole pool.
"""

from __future__ import annotations

import logging
from typing import Any

from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.kube_watch import ListThenWatch, get, http_status, keep
from eppkit.services.picker.pool import Pool

log = logging.getLogger("picker.kube_pool")
# lightkube's HTTP client logs every request at INFO, watches included: one line per event.
logging.getLogger("httpx2").setLevel(logging.WARNING)

KIND, PLURAL = "InferencePool", "inferencepools"
# The InferencePool's API group (GAIE's --pool-group) and the version served in it.
VERSIONS = {"inference.networking.k8s.io": "v1", "inference.networking.x-k8s.io": "v1alpha2"}
DEFAULT_GROUP = "inference.networking.k8s.io"


def pod_ready(pod: Any) -> bool:
    return any(get(c, "type") == "Ready" and get(c, "status") == "True"
               for c in (get(pod, "status", "conditions") or []))


def endpoints_for(pool_spec: dict | None, pods: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(name, ip, port) of every endpoint: Ready pods the selector matches, on each target port."""
    if not pool_spec:
        return []
    selector = (pool_spec.get("selector") or {}).get("matchLabels") or {}
    ports = [int(p["number"]) for p in pool_spec.get("targetPorts") or []]
    found = []
    for name in sorted(pods):
        pod = pods[name]
        labels = get(pod, "metadata", "labels") or {}
        ip = get(pod, "status", "podIP")
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
        self._kube = ListThenWatch(kubeconfig, namespace, self._apply)

    async def start(self) -> None:
        from lightkube.generic_resource import create_namespaced_resource
        from lightkube.resources.core_v1 import Pod

        pool_kind = create_namespaced_resource(self.group, VERSIONS[self.group], KIND, PLURAL)
        try:
            await self._kube.list(pool_kind, self._on_pool, "kube-pool-watch", fields={"metadata.name": self.name})
        except Exception as exc:
            if http_status(exc) != 404:
                raise
            # controller-runtime's words, so whoever reads EPP logs finds it the same way for every EPP
            log.error('no matches for kind "%s" in version "%s/%s": the cluster has no CRD for it',
                      KIND, self.group, VERSIONS[self.group])
            raise SystemExit(1) from None
        await self._kube.list(Pod, self._on_pod, "kube-pods-watch")
        if self.spec is None:
            log.warning("no InferencePool %s in namespace %s (yet): the pool is empty", self.name, self.namespace)
        self._apply()
        self._kube.watch()

    async def stop(self) -> None:
        await self._kube.stop()  # a watch that had ended is no news at the end

    def _on_pool(self, event: str, obj: Any) -> None:
        self.spec = None if event == "DELETED" else dict(get(obj, "spec") or {})

    def _on_pod(self, event: str, obj: Any) -> None:
        keep(self.pods, event, obj)

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
