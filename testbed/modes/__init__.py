"""Integration modes as plug-ins: one module per mode, each with ``plan(topology, ports, backends)``."""

from __future__ import annotations

import importlib

from testbed.envoy_config import MODES
from testbed.topology import Endpoint, ModePlan, PortAllocator, Topology


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint]) -> ModePlan:
    if topology.mode not in MODES:
        raise ValueError(f"unknown mode {topology.mode!r}; choose one of {', '.join(MODES)}")
    module = importlib.import_module(f"testbed.modes.{topology.mode.replace('-', '_')}")
    return module.plan(topology, ports, backends)
