"""direct: Envoy routes straight to the pool; nobody picks. The overhead baseline."""

from __future__ import annotations

from testbed.topology import Endpoint, ModePlan, PortAllocator, Topology


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint]) -> ModePlan:
    return ModePlan(services=[], envoy_vars={})
