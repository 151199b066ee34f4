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

The vLLMs are the topology's backend (eppkit.backends): the kit's mocks, llm-d-inference-sim
started in their places, or servers you run given by URL (the kit then starts only the pd-sidecars).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eppkit import backends
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
    topology.backend.validate(topology.flow)


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


def _instance(topology: Topology, ports: PortAllocator, name: str, role: str, model: str,
              extra: list[str], host: str = "127.0.0.1", port: int | None = None) -> tuple[ServiceSpec, Endpoint]:
    """One vLLM the kit starts: its mock, or the llm-d-inference-sim preset in its place.
    ``host``/``port``: a pod address of its own (modes whose EPP sees an InferencePool)."""
    if topology.backend.kind == backends.SIM:
        from eppkit import inference_sim

        if host != "127.0.0.1":
            raise ValueError(f"the {topology.mode} mode puts each pod on its own loopback address, and "
                             f"{inference_sim.NAME} binds every interface: use the kit's mocks there")
        # It binds every interface: its port must be free there too, not only on loopback.
        port = ports.port(all_interfaces=True)
        argv = inference_sim.command(inference_sim.require_binary(), port=port, model=model, seed=topology.seed,
                                     latency=topology.latency, extra=extra)
        spec = ServiceSpec(name, inference_sim.NAME, port, health_path=inference_sim.READY_PATH,
                           env=inference_sim.env(name), argv=argv)
    else:
        port = port or ports.port()
        spec = ServiceSpec(name, "eppkit.services.vllm", port, _vllm_args(topology, name, role, model, extra),
                           host=host)
    return spec, Endpoint(name, host, port, role, model)


def plan(topology: Topology, ports: PortAllocator, run_dir: Path) -> FlowPlan:
    check(topology)
    out = FlowPlan()
    urls = topology.backend.kind == backends.URLS
    if topology.flow in ("aggregated", "multipart"):
        if urls:
            out.routable = topology.backend.endpoints("both")
            return out
        # The mock vLLM switches to its two-phase reading on a multipart/mixed content type,
        # so the multipart flow starts the same vLLMs as the aggregated one.
        from eppkit import modes  # flows is imported by the modes package: a cycle at import time

        hosts = pod_hosts(len(topology.vllm)) if modes.get(topology.mode).pod_addresses else None
        shared = ports.shared_port(hosts) if hosts else None
        for i, spec in enumerate(topology.vllm):
            host, port = (hosts[i], shared) if hosts else ("127.0.0.1", None)
            service, endpoint = _instance(topology, ports, spec.name, spec.role, spec.model, spec.extra_args,
                                          host=host, port=port)
            out.services.append(service)
            out.routable.append(endpoint)
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
    if urls:
        out.prefill = topology.backend.endpoints("prefill")
        if topology.flow == "ttft":  # prefill's first token, then decode's rest: one text only if seed decides it
            backends.check_seed([*out.prefill, *topology.backend.endpoints("decode")])
    for i in range(0 if disable_prefill or urls else max(1, topology.prefill)):
        service, endpoint = _instance(topology, ports, f"vllm-p{i}", "prefill", model, [*ec_args, *extra])
        out.services.append(service)
        out.prefill.append(endpoint)

    role = "both" if disable_prefill else "decode"
    if urls:
        decoders = topology.backend.endpoints("decode")
    else:
        decoders = []
        for i in range(max(1, topology.decode)):
            service, endpoint = _instance(topology, ports, f"vllm-d{i}", role, model, [*ec_args, *extra])
            out.services.append(service)
            decoders.append(endpoint)
    for i, decoder in enumerate(decoders):
        sidecar_port = ports.port()
        args = ["--decode", f"http://{decoder.address}", "--instance", f"pd-sidecar-{i}", "--decode-instance", decoder.name]
        if out.prefill:
            args += ["--prefill-endpoints", ",".join(e.address for e in out.prefill)]
        else:
            args += ["--disable-prefill"]
        if out.encoders:
            args += ["--encoder-endpoints", ",".join(e.address for e in out.encoders)]
        if topology.flow == "ttft":
            args += ["--stream-first-token"]
        out.services.append(ServiceSpec(f"pd-sidecar-{i}", "eppkit.services.pd_sidecar", sidecar_port, args))
        out.routable.append(Endpoint(decoder.name, "127.0.0.1", sidecar_port, role, decoder.model or model))
    return out
