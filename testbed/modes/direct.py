"""direct: Envoy routes straight to the pool; nobody picks. The overhead baseline.

Topology options: body_routing (bool) puts the body-based model router in front.
"""

from __future__ import annotations

from eppkit.body_routing import body_routing_vars
from eppkit.topology import Endpoint, ModePlan, PortAllocator, Topology


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint], pools=None) -> ModePlan:
    # Nobody picks: the pd-sidecars fall back to their own prefill/encoder round robin.
    return ModePlan(services=[], envoy_vars=body_routing_vars(topology, backends))
