"""ext_proc: the EPP (``services.epp``) picks each request's endpoint over Envoy's ext_proc protocol.

Options read from ``topology.options`` (all optional):

| key | default | meaning |
|---|---|---|
| ``failure_mode_allow`` | False | Envoy lets requests through (default route, round-robin) when the EPP fails |
| ``epp_status_on_error`` | None | HTTP status Envoy answers when the EPP fails and it fails closed (Envoy: 500) |
| ``body_routing`` | False | body-based model router in front; one pool per model; the EPP picks within the model |
| ``scorer`` | ``least-queue`` | ``round-robin`` / ``least-queue`` / ``prefix-cache`` |
| ``metrics_interval`` | 0.2 | seconds between the EPP's ``/metrics`` scrapes; 0 turns them off |
| ``shed_queue_threshold`` | 0 | waiting-queue length at which an endpoint is full; all full: 429; 0 never |
| ``prefix_block_size`` | 64 | prefix-cache scorer block size, characters |
| ``epp_message_timeout_ms`` | 10000 | Envoy's per-message wait for the EPP (not armed by Envoy 1.40 in FULL_DUPLEX_STREAMED) |
| ``epp_keepalive_ms`` | 0 | HTTP/2 PING interval and timeout on the EPP connection: a hung EPP fails its requests (500) after twice this; 0: off |
| ``epp_health_check_interval_ms`` | 500 | Envoy's TCP health check of the EPP; 0: none (then fail-open cannot work for requests with a body, see docs/modes-ext_proc.md) |
| ``epp_process_response`` | False | also send response headers/body through the EPP |
| ``epp_disabled`` | False | do not start the EPP (Envoy still points at its port): the EPP-down case |
| ``epp_args`` | [] | extra command-line arguments for the EPP |
| ``multipart_trigger`` | ``first-token`` | multipart flow: part 2 on a streamed request's first token, or always on the response ``headers`` |

Flows: in pd / epd / ttft the EPP also gets the prefill and encoder pools (``--prefill-endpoints``,
``--encoder-endpoints``) and names them in ``x-prefiller-host-port`` / ``x-encoder-hosts-ports``.
In ``multipart`` (``topology.flow``) the EPP runs the two-phase flow (``--multipart``) and
Envoy sends it the response headers and body (the EPP must see the response headers to
inject part 2), whatever ``epp_process_response`` says.
"""

from __future__ import annotations

from typing import Any

from eppkit.body_routing import body_routing_vars
from eppkit.modes import stage_endpoints
from eppkit.topology import Endpoint, ModePlan, PortAllocator, ServiceSpec, Topology


def pool_arg(backends: list[Endpoint], *, with_models: bool = False) -> str:
    """``--endpoints`` value: ``name=host:port[@model]`` so the EPP reports the names tests compare with."""
    return ",".join(f"{b.name}={b.address}" + (f"@{b.model}" if with_models else "") for b in backends)


def stage_args(pools) -> list[str]:
    """The EPP's prefill / encoder pools in the disaggregated flows (none otherwise)."""
    prefill, encoders = stage_endpoints(pools)
    args: list[str] = []
    if prefill:
        args += ["--prefill-endpoints", pool_arg(prefill)]
    if encoders:
        args += ["--encoder-endpoints", pool_arg(encoders)]
    return args


def epp_args(options: dict[str, Any], backends: list[Endpoint], pools=None, *, flow: str = "aggregated") -> list[str]:
    args = [
        "--endpoints", pool_arg(backends, with_models=bool(options.get("body_routing"))),
        "--scorer", str(options.get("scorer", "least-queue")),
        "--metrics-interval", str(options.get("metrics_interval", 0.2)),
        "--shed-queue-threshold", str(options.get("shed_queue_threshold", 0)),
        "--prefix-block-size", str(options.get("prefix_block_size", 64)),
        *stage_args(pools),
    ]
    if flow == "multipart":
        args += ["--multipart", "--multipart-trigger", str(options.get("multipart_trigger", "first-token"))]
    return args + [str(a) for a in options.get("epp_args", [])]


def envoy_vars(topology: Topology, backends: list[Endpoint], epp_port: int) -> dict[str, Any]:
    options = topology.options
    multipart = topology.flow == "multipart"
    return {
        **body_routing_vars(topology, backends),
        "epp_port": epp_port,
        "epp_status_on_error": options.get("epp_status_on_error"),
        "failure_mode_allow": bool(options.get("failure_mode_allow", False)),
        "epp_message_timeout_ms": int(options.get("epp_message_timeout_ms", 10000)),
        "epp_process_response": bool(options.get("epp_process_response", False)) or multipart,
        "epp_multipart": multipart,
        "picked_cleanup_interval_s": 5,
        "epp_health_check_interval_ms": int(options.get("epp_health_check_interval_ms", 500)),
        "epp_keepalive_ms": int(options.get("epp_keepalive_ms", 0)),
    }


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint], pools=None) -> ModePlan:
    options = topology.options
    epp_port = ports.port()
    services = []
    if not options.get("epp_disabled", False):
        services.append(
            ServiceSpec(
                name="epp",
                module="eppkit.services.epp",
                port=epp_port,
                args=epp_args(options, backends, pools, flow=topology.flow),
                health_path=None,  # gRPC: the testbed waits for the TCP port
            )
        )
    return ModePlan(services=services, envoy_vars=envoy_vars(topology, backends, epp_port))
