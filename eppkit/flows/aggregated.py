"""aggregated: one vLLM (role both) serves the whole request; Envoy routes to the topology's vLLMs."""

from __future__ import annotations

from eppkit.flows._servers import pool
from eppkit.flows.registry import Flow, register
from eppkit.observability import expected_spans as ex

FLOW = register(Flow(
    name="aggregated", summary="one PD vLLM serves the whole request", order=0,
    plan=lambda topology, ports, run_dir, pod_addresses: pool(topology, ports, pod_addresses),
    spans=lambda topology, emits, media_items: ex.backend_one(emits),
))
