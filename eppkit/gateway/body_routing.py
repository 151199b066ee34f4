"""Body-based routing, usable in front of any mode: the model name from the JSON body picks the pool.

Envoy's own filters do it (envoy/_body_router.j2: json_to_metadata reads the top-level ``"model"``,
routes match on it, header_mutation copies it into ``x-gateway-model-name`` for the pickers; see
docs/body-routing.md). Here: the pools (one per model) that the templates turn into routes and
clusters. Mode plug-ins merge :func:`body_routing_vars` into their envoy_vars.
"""

from __future__ import annotations

import re
from typing import Any

from eppkit.plan import Endpoint


def pools_for(backends: list[Endpoint], *, by_model: bool) -> list[dict[str, Any]]:
    """One pool of every backend (cluster ``pool``), or one pool per model in first-seen order."""
    if not backends:
        raise ValueError("a pool needs at least one backend")
    if not by_model:
        return [{"model": None, "cluster": "pool", "endpoints": list(backends)}]
    pools: dict[str, dict[str, Any]] = {}
    for ep in backends:
        if ep.model not in pools:
            cluster = "pool_" + re.sub(r"[^A-Za-z0-9_.-]", "_", ep.model)
            if any(p["cluster"] == cluster for p in pools.values()):
                cluster += f"_{len(pools)}"
            pools[ep.model] = {"model": ep.model, "cluster": cluster, "endpoints": []}
        pools[ep.model]["endpoints"].append(ep)
    return list(pools.values())


def body_routing_vars(enabled: bool, backends: list[Endpoint]) -> dict[str, Any]:
    """Template variables for envoy/_body_router.j2: body_routing and pools."""
    return {"body_routing": enabled, "pools": pools_for(backends, by_model=enabled)}
