"""Sheddable requests dropped when the pool is saturated, as GAIE's EPP v1.5.0 does it.

A request names its InferenceObjective in ``x-gateway-inference-objective``; the objective's ``spec.priority`` is
its priority (an objective not known, or none named: 0, GAIE's default). A negative priority is *sheddable*: it is
answered 429 when the pool is saturated. Both rules are GAIE's (``pkg/epp/requestcontrol/admission.go``: the
legacy admission controller, its default; ``pkg/epp/util/request/sheddable.go``).

Saturation is GAIE's utilization detector's (``saturationdetector/utilization/detector.go``): each candidate
endpoint scores ``max(waiting / queue_depth_threshold, kv_cache_usage / kv_cache_util_threshold)``, the pool the
mean of its endpoints' scores, saturated at 1.0 or more. Every endpoint over either threshold is saturated; so is
a pool whose some endpoints are far over while others idle. The thresholds are GAIE's defaults (5 waiting,
KV-cache 0.8), the picker settings ``queue_depth_threshold`` and ``kv_cache_util_threshold`` (0: that ratio is not
read; both 0: the pool is never saturated). Where GAIE counts an endpoint whose metrics are older than 200 ms as
saturated, the picker reads each endpoint's last scrape (an endpoint not scraped yet scores 0).

The objectives come from the control plane when the pool does (:class:`KubeObjectives`, beside
:class:`~eppkit.services.picker.kube_pool.KubePool`): every InferenceObjective in the pool's namespace whose
``spec.poolRef`` names the pool, kept by a watch. Without a control plane no objective is known, and every request
has priority 0 (never shed for saturation).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from eppkit.services.picker import headers as h
from eppkit.services.picker.endpoints import PoolEndpoint
from eppkit.services.picker.kube_pool import DEFAULT_GROUP
from eppkit.services.picker.kube_watch import ListThenWatch, get, http_status, keep

log = logging.getLogger("picker.saturation")

# GAIE's InferenceObjective (v1.5.0: inference.networking.x-k8s.io/v1alpha2).
OBJECTIVE_GROUP, OBJECTIVE_VERSION, OBJECTIVE_KIND, OBJECTIVE_PLURAL = (
    "inference.networking.x-k8s.io", "v1alpha2", "InferenceObjective", "inferenceobjectives")
DEFAULT_PRIORITY = 0  # GAIE's, for a request whose objective is unknown or has no priority
# GAIE's utilization detector's defaults (v1.5.0).
QUEUE_DEPTH_THRESHOLD, KV_CACHE_UTIL_THRESHOLD = 5, 0.8


def sheddable(priority: int) -> bool:
    """GAIE's rule: a request of negative priority may be shed."""
    return priority < 0


@dataclass
class Objectives:
    """InferenceObjective name -> priority, as the picker knows them."""

    priorities: dict[str, int] = field(default_factory=dict)

    def priority(self, request_headers: dict[str, str]) -> int:
        """The priority of the objective a request names (``x-gateway-inference-objective``)."""
        return self.priorities.get(request_headers.get(h.OBJECTIVE, ""), DEFAULT_PRIORITY)


@dataclass(frozen=True)
class Saturation:
    """GAIE's utilization detector over the endpoints' last scrape (see the module docstring)."""

    queue_depth_threshold: float = QUEUE_DEPTH_THRESHOLD
    kv_cache_util_threshold: float = KV_CACHE_UTIL_THRESHOLD

    @property
    def active(self) -> bool:
        return self.queue_depth_threshold > 0 or self.kv_cache_util_threshold > 0

    def score(self, ep: PoolEndpoint, *, picked: bool = False) -> float:
        """``picked``: the picks since its last scrape counted as waiting (flow control's room: one freed slot, one
        request on)."""
        ratios = [0.0]
        if self.queue_depth_threshold > 0:
            waiting = (ep.waiting or 0.0) + (ep.picked_since_scrape if picked else 0)
            ratios.append(waiting / self.queue_depth_threshold)
        if self.kv_cache_util_threshold > 0:
            ratios.append((ep.kv_usage or 0.0) / self.kv_cache_util_threshold)
        return max(ratios)

    def of(self, endpoints: Iterable[PoolEndpoint], *, picked: bool = False) -> float:
        """The pool's saturation: the mean of its endpoints' scores (0 for none, or with the detector off)."""
        scores = [self.score(ep, picked=picked) for ep in endpoints]
        return sum(scores) / len(scores) if scores and self.active else 0.0

    def describe(self, endpoints: Iterable[PoolEndpoint]) -> str:
        return "; ".join(f"{ep.name}: waiting={ep.waiting or 0:g} kv_cache={ep.kv_usage or 0:.2f}" for ep in endpoints)


class KubeObjectives:
    """Keeps ``objectives`` equal to the InferenceObjectives of the pool ``pool_name`` in ``namespace`` (a list,
    then a watch from its resourceVersion; GAIE's reconciler keeps those whose ``spec.poolRef`` names the pool
    and its group). A cluster without the kind: a warning, and every request keeps priority 0."""

    def __init__(self, objectives: Objectives, kubeconfig: str, namespace: str, pool_name: str,
                 pool_group: str = DEFAULT_GROUP) -> None:
        self.objectives = objectives
        self.kubeconfig, self.namespace, self.pool_name, self.pool_group = kubeconfig, namespace, pool_name, pool_group
        self._known: dict[str, Any] = {}
        self._kube = ListThenWatch(kubeconfig, namespace, self._apply)

    async def start(self) -> None:
        from lightkube.generic_resource import create_namespaced_resource

        kind = create_namespaced_resource(OBJECTIVE_GROUP, OBJECTIVE_VERSION, OBJECTIVE_KIND, OBJECTIVE_PLURAL)
        try:
            await self._kube.list(kind, lambda event, obj: keep(self._known, event, obj), "kube-objectives-watch")
        except Exception as exc:
            status = http_status(exc)
            if status not in (403, 404):
                raise
            log.warning("cannot list %s.%s in namespace %s (HTTP %s): every request has priority %d",
                        OBJECTIVE_PLURAL, OBJECTIVE_GROUP, self.namespace, status, DEFAULT_PRIORITY)
            return
        self._apply()
        self._kube.watch()

    def _apply(self) -> None:
        self.objectives.priorities = priorities_for(self._known.values(), self.pool_name, self.pool_group)

    async def stop(self) -> None:
        for exc in await self._kube.stop():  # stopping: whatever ended the watch is said, not raised
            log.warning("the InferenceObjective watch had ended: %s", exc)


def priorities_for(objects: Iterable[Any], pool_name: str, pool_group: str = DEFAULT_GROUP) -> dict[str, int]:
    """name -> priority of the InferenceObjectives whose ``spec.poolRef`` names the pool (its group, GAIE's
    default when the object gives none); an objective without a priority has GAIE's default."""
    found = {}
    for obj in objects:
        ref = get(obj, "spec", "poolRef") or {}
        if ref.get("name") != pool_name or (ref.get("group") or DEFAULT_GROUP) != pool_group:
            continue
        priority = get(obj, "spec", "priority")
        found[get(obj, "metadata", "name")] = int(priority) if priority is not None else DEFAULT_PRIORITY
    log.info("InferenceObjectives of pool %s: %s", pool_name,
             ", ".join(f"{k}={v}" for k, v in sorted(found.items())) or "none")
    return found
