"""ext_proc: the EPP (``services.epp``) picks each request's endpoint over Envoy's ext_proc protocol.

Options read from ``topology.options`` (all optional):

| key | default | meaning |
|---|---|---|
| ``failure_mode_allow`` | False | Envoy lets requests through (default route, round-robin) when the EPP fails |
| ``scorer`` | ``least-queue`` | ``round-robin`` / ``least-queue`` / ``prefix-cache`` |
| ``metrics_interval`` | 0.2 | seconds between the EPP's ``/metrics`` scrapes; 0 turns them off |
| ``shed_threshold`` | 0 | queue depth at which every endpoint counts as full and requests get 429; 0 never |
| ``prefix_block_size`` | 64 | prefix-cache scorer block size, characters |
| ``epp_message_timeout_ms`` | 10000 | Envoy's per-message wait for the EPP |
| ``epp_process_response`` | False | also send response headers/body through the EPP |
| ``epp_disabled`` | False | do not start the EPP (Envoy still points at its port): the EPP-down case |
| ``epp_args`` | [] | extra command-line arguments for the EPP |
"""

from __future__ import annotations

from typing import Any

from testbed.topology import Endpoint, ModePlan, PortAllocator, ServiceSpec, Topology


def pool_arg(backends: list[Endpoint]) -> str:
    """``--endpoints`` value: ``name=host:port`` so the EPP reports the names tests compare with."""
    return ",".join(f"{b.name}={b.address}" for b in backends)


def epp_args(options: dict[str, Any], backends: list[Endpoint]) -> list[str]:
    args = [
        "--endpoints", pool_arg(backends),
        "--scorer", str(options.get("scorer", "least-queue")),
        "--metrics-interval", str(options.get("metrics_interval", 0.2)),
        "--shed-threshold", str(options.get("shed_threshold", 0)),
        "--prefix-block-size", str(options.get("prefix_block_size", 64)),
    ]
    return args + [str(a) for a in options.get("epp_args", [])]


def envoy_vars(options: dict[str, Any], epp_port: int) -> dict[str, Any]:
    return {
        "epp_port": epp_port,
        "failure_mode_allow": bool(options.get("failure_mode_allow", False)),
        "epp_message_timeout_ms": int(options.get("epp_message_timeout_ms", 10000)),
        "epp_process_response": bool(options.get("epp_process_response", False)),
        "picked_cleanup_interval_s": 5,
    }


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint]) -> ModePlan:
    options = topology.options
    epp_port = ports.port()
    services = []
    if not options.get("epp_disabled", False):
        services.append(
            ServiceSpec(
                name="epp",
                module="services.epp",
                port=epp_port,
                args=epp_args(options, backends),
                health_path=None,  # gRPC: the testbed waits for the TCP port
            )
        )
    return ModePlan(services=services, envoy_vars=envoy_vars(options, epp_port))
