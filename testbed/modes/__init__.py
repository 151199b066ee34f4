"""Integration modes as plug-ins: one module per mode, each with ``plan(topology, ports, backends, pools=None)``.

``backends`` are what Envoy routes to (the decoders' pd-sidecars in disaggregated flows);
``pools`` is the flow's layout (:class:`testbed.flows.FlowPlan`), whose ``prefill`` and
``encoders`` lists the picker modes hand to their picker so it chooses those stages too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from eppkit.envoy_config import MODES
from eppkit.topology import Endpoint, ModePlan, PortAllocator, ServiceSpec, Topology

if TYPE_CHECKING:
    from eppkit.flows import FlowPlan


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint], pools: "FlowPlan | None" = None) -> ModePlan:
    if topology.mode not in MODES:
        raise ValueError(f"unknown mode {topology.mode!r}; choose one of {', '.join(MODES)}")
    module = importlib.import_module(f"eppkit.modes.{topology.mode.replace('-', '_')}")
    return module.plan(topology, ports, backends, pools=pools)


def stage_endpoints(pools: "FlowPlan | None") -> tuple[list[Endpoint], list[Endpoint]]:
    """(prefillers, encoders) of the flow, empty when there are none (aggregated, multipart)."""
    if pools is None:
        return [], []
    return list(pools.prefill), list(pools.encoders)


def callout_service(topology: Topology, ports: PortAllocator, backends: list[Endpoint],
                    pools: "FlowPlan | None", *, body_routing: bool) -> ServiceSpec:
    """The callout routing service both callout modes (Lua, dynamic module) ask.

    With body routing the callout learns each endpoint's model and picks within the model
    named by x-gateway-model-name; without it every endpoint serves every request. In
    pd / epd / ttft it also gets the flow's prefillers and encoders (``host:port=name``).
    """
    options = topology.options
    suffix = (lambda ep: f"@{ep.model}") if body_routing else (lambda ep: "")
    endpoints = ",".join(f"{ep.address}={ep.name}{suffix(ep)}" for ep in backends)
    args = ["--endpoints", endpoints, "--scorer", str(options.get("scorer", "round-robin"))]
    prefill, encoders = stage_endpoints(pools)
    if prefill:
        args += ["--prefill-endpoints", ",".join(f"{ep.address}={ep.name}" for ep in prefill)]
    if encoders:
        args += ["--encoder-endpoints", ",".join(f"{ep.address}={ep.name}" for ep in encoders)]
    if options.get("pick_latency_ms"):
        args += ["--pick-latency", str(options["pick_latency_ms"])]
    return ServiceSpec(name="callout", module="eppkit.services.callout", port=ports.port(), args=args)
