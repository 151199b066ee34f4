"""Flows as process layouts: which mocks and sidecars a flow needs, and which of them Envoy routes to.

| flow        | processes                                                             | Envoy routes to |
|-------------|-----------------------------------------------------------------------|-----------------|
| aggregated  | the topology's vLLMs (role both)                                      | the vLLMs       |
| pd          | prefill vLLMs, decode vLLMs, one pd-sidecar in front of each decoder  | the sidecars    |
| epd         | as pd, plus encoders sharing an encoder-cache dir with P (or PD)      | the sidecars    |
| ttft        | as pd, sidecars stream prefill's first token                          | the sidecars    |
| multipart   | the topology's vLLMs; the mock takes a multipart/mixed body (no flag)   | the vLLMs       |

A routed endpoint keeps the decoder's name, so ``x-inference-pod`` (copied through the
sidecar) still says which decoder served. ``prefill`` and ``encoders`` go to the picker modes
(``testbed.modes.plan(..., pools=)``), whose picker names them per request in
``x-prefiller-host-port`` / ``x-encoder-hosts-ports``; the sidecars' own lists are only their
fallback (direct mode).

``multipart`` needs mode ``ext_proc``: only the EPP can send part 1, hold the request open
and inject part 2 once it has seen the response headers (docs/flows.md). :func:`check`
says so before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eppkit.topology import Endpoint, PortAllocator, ServiceSpec, Topology

FLOWS = ("aggregated", "pd", "epd", "ttft", "multipart")
# Flows only the modes that list them in Mode.special_flows can run, and why.
SPECIAL_FLOWS = {
    "multipart": "the picker must send part 1, hold the request open and inject part 2 after the response "
                 "headers; only the EPP (ext_proc) can (docs/flows.md, docs/dynmod-multipart.md)",
}


def check(topology: Topology) -> None:
    """ValueError naming the problem when the flow cannot run in the topology's mode (or the mode is unknown)."""
    from eppkit import modes

    if topology.flow not in FLOWS:
        raise ValueError(f"unknown flow {topology.flow!r}; choose one of {', '.join(FLOWS)}")
    mode = modes.get(topology.mode)
    why = SPECIAL_FLOWS.get(topology.flow)
    if why is not None and topology.flow not in mode.special_flows:
        able = [m.name for m in modes.all_modes() if topology.flow in m.special_flows]
        raise ValueError(f"--flow {topology.flow} needs --mode {' or '.join(able)} (got --mode {topology.mode}): {why}")


@dataclass
class FlowPlan:
    services: list[ServiceSpec] = field(default_factory=list)  # in start order
    routable: list[Endpoint] = field(default_factory=list)  # what pickers choose from / Envoy routes to
    prefill: list[Endpoint] = field(default_factory=list)
    encoders: list[Endpoint] = field(default_factory=list)


def pod_hosts(n: int) -> list[str]:
    """One loopback address per pod, 127.0.0.2 upwards (Linux routes all of 127/8 to lo)."""
    if n > 250:
        raise ValueError("at most 250 pods on their own loopback addresses")
    return [f"127.0.0.{i + 2}" for i in range(n)]


def _vllm_args(topology: Topology, name: str, role: str, model: str, extra: list[str]) -> list[str]:
    return ["--role", role, "--instance", name, "--served-model-name", model, *topology.latency.args(),
            "--seed", str(topology.seed), *extra]


def plan(topology: Topology, ports: PortAllocator, run_dir: Path) -> FlowPlan:
    check(topology)
    out = FlowPlan()
    if topology.flow in ("aggregated", "multipart"):
        # The mock vLLM switches to its two-phase reading on a multipart/mixed content type,
        # so the multipart flow starts the same vLLMs as the aggregated one.
        from eppkit import modes  # flows is imported by the modes package: a cycle at import time

        hosts = pod_hosts(len(topology.vllm)) if modes.get(topology.mode).pod_addresses else None
        shared = ports.shared_port(hosts) if hosts else None
        for i, spec in enumerate(topology.vllm):
            host, port = (hosts[i], shared) if hosts else ("127.0.0.1", ports.port())
            out.services.append(ServiceSpec(spec.name, "eppkit.services.vllm", port,
                                            _vllm_args(topology, spec.name, spec.role, spec.model, spec.extra_args),
                                            host=host))
            out.routable.append(Endpoint(spec.name, host, port, spec.role, spec.model))
        return out

    model = topology.vllm[0].model if topology.vllm else "mock-llm"
    extra = topology.vllm[0].extra_args if topology.vllm else []
    ec_args: list[str] = []
    if topology.flow == "epd":
        ec_dir = run_dir / "ec-cache"
        ec_dir.mkdir(parents=True, exist_ok=True)
        ec_args = ["--ec-cache-dir", str(ec_dir)]
        for i in range(max(1, topology.encoders)):
            name, port = f"encoder-{i}", ports.port()
            out.services.append(ServiceSpec(name, "eppkit.services.encoder", port,
                                            ["--instance", name, "--served-model-name", model,
                                             "--encode-latency", f"{topology.encode_latency:g}", *ec_args]))
            out.encoders.append(Endpoint(name, "127.0.0.1", port, "encode", model))

    disable_prefill = topology.flow == "epd" and topology.prefill == 0
    for i in range(0 if disable_prefill else max(1, topology.prefill)):
        name, port = f"vllm-p{i}", ports.port()
        out.services.append(ServiceSpec(name, "eppkit.services.vllm", port,
                                        _vllm_args(topology, name, "prefill", model, [*ec_args, *extra])))
        out.prefill.append(Endpoint(name, "127.0.0.1", port, "prefill", model))

    for i in range(max(1, topology.decode)):
        name, port = f"vllm-d{i}", ports.port()
        role = "both" if disable_prefill else "decode"
        out.services.append(ServiceSpec(name, "eppkit.services.vllm", port,
                                        _vllm_args(topology, name, role, model, [*ec_args, *extra])))
        sidecar_port = ports.port()
        args = ["--decode", f"http://127.0.0.1:{port}", "--instance", f"pd-sidecar-{i}", "--decode-instance", name]
        if out.prefill:
            args += ["--prefill-endpoints", ",".join(e.address for e in out.prefill)]
        else:
            args += ["--disable-prefill"]
        if out.encoders:
            args += ["--encoder-endpoints", ",".join(e.address for e in out.encoders)]
        if topology.flow == "ttft":
            args += ["--stream-first-token"]
        out.services.append(ServiceSpec(f"pd-sidecar-{i}", "eppkit.services.pd_sidecar", sidecar_port, args))
        out.routable.append(Endpoint(name, "127.0.0.1", sidecar_port, role, model))
    return out
