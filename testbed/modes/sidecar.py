"""sidecar: the EPP asks the frontend sidecar (``services.frontend``) for every decision.

The Dynamo proposal for the Gateway API Inference Extension: the EPP forwards the request body
to the frontend with ``x-routing-request: true``; the frontend tokenizes, routes (KV/prefix
aware) and answers the worker; the EPP sets ``x-gateway-destination-endpoint`` and
``x-gateway-worker-id``. Envoy's side is the ext_proc one.

Options: those of ``testbed.modes.ext_proc`` (``scorer`` and ``shed_queue_threshold`` do not apply:
the frontend decides), plus:

| key | default | meaning |
|---|---|---|
| ``frontend_block_size`` | 16 | tokens per KV block in the frontend's router |
| ``frontend_args`` | [] | extra command-line arguments for the frontend |
| ``frontend_disabled`` | False | do not start the frontend (the EPP still points at its port) |

In pd / epd / ttft the frontend picks the decoder and the EPP adds the prefiller and encoders
(``x-prefiller-host-port`` / ``x-encoder-hosts-ports``), scoring prefillers with ``scorer``
(default least-queue).
"""

from __future__ import annotations

from eppkit.modes.ext_proc import envoy_vars, pool_arg, stage_args
from eppkit.topology import Endpoint, ModePlan, PortAllocator, ServiceSpec, Topology


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint], pools=None) -> ModePlan:
    options = topology.options
    frontend_port = ports.port()
    epp_port = ports.port()
    services = []
    if not options.get("frontend_disabled", False):
        services.append(
            ServiceSpec(
                name="frontend",
                module="eppkit.services.frontend",
                port=frontend_port,
                args=[
                    "--endpoints", pool_arg(backends, with_models=bool(options.get("body_routing"))),
                    "--block-size", str(options.get("frontend_block_size", 16)),
                    "--metrics-interval", str(options.get("metrics_interval", 0.2)),
                    *[str(a) for a in options.get("frontend_args", [])],
                ],
            )
        )
    if not options.get("epp_disabled", False):
        services.append(
            ServiceSpec(
                name="epp",
                module="eppkit.services.epp",
                port=epp_port,
                args=[
                    "--endpoints", pool_arg(backends, with_models=bool(options.get("body_routing"))),
                    "--frontend-url", f"http://127.0.0.1:{frontend_port}",
                    "--metrics-interval", str(options.get("metrics_interval", 0.2)),
                    "--scorer", str(options.get("scorer", "least-queue")),  # for the prefillers
                    *stage_args(pools),
                    *[str(a) for a in options.get("epp_args", [])],
                ],
                health_path=None,
            )
        )
    return ModePlan(services=services, envoy_vars=envoy_vars(topology, backends, epp_port))
