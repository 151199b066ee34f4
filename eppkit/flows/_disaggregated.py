"""What the disaggregated flows (pd, ttft, epd) share: prefill and decode servers, a pd-sidecar in front of each decoder.

A routed endpoint keeps the decoder's name, so ``x-inference-pod`` (copied through the sidecar)
still says which decoder served. The prefillers and encoders go to the picker modes
(``Mode.plan(..., pools=)``), whose picker names them per request in ``x-prefiller-host-port`` /
``x-encoder-hosts-ports``; the sidecars' own lists are only their fallback (direct mode).
"""

from __future__ import annotations

from pathlib import Path

from eppkit.backends import check_seed
from eppkit.components.ports import PortAllocator
from eppkit.flows._servers import instance
from eppkit.flows.registry import FlowPlan
from eppkit.plan import Endpoint, ServiceSpec
from eppkit.topology import Topology


def plan(topology: Topology, ports: PortAllocator, run_dir: Path, *, encoders: bool = False,
         stream_first_token: bool = False) -> FlowPlan:
    """Prefill vLLMs, decode vLLMs behind their pd-sidecars (Envoy routes to the sidecars) and, with
    ``encoders``, encoders sharing an encoder-cache folder with the prefillers (``--prefill 0``: E+PD)."""
    out = FlowPlan()
    model = topology.vllm[0].model if topology.vllm else "mock-llm"
    extra = topology.vllm[0].extra_args if topology.vllm else []
    urls = not topology.backend.starts_servers  # servers you run: the kit starts only the pd-sidecars
    ec_args: list[str] = []
    if encoders:
        ec_dir = run_dir / "ec-cache"
        ec_dir.mkdir(parents=True, exist_ok=True)
        ec_args = ["--ec-cache-dir", str(ec_dir)]
        for i in range(max(1, topology.encoders)):
            name, port = f"encoder-{i}", ports.port()
            out.services.append(ServiceSpec(name, "eppkit.services.encoder", port,
                                            ["--instance", name, "--served-model-name", model,
                                             "--encode-latency", f"{topology.encode_latency:g}", *ec_args]))
            out.encoders.append(Endpoint(name, "127.0.0.1", port, "encode", model))

    disable_prefill = encoders and topology.prefill == 0
    if urls:
        out.prefill = topology.backend.endpoints("prefill")
        if stream_first_token:  # prefill's first token, then decode's rest: one text only if seed decides it
            check_seed([*out.prefill, *topology.backend.endpoints("decode")])
    for i in range(0 if disable_prefill or urls else max(1, topology.prefill)):
        service, endpoint = instance(topology, ports, f"vllm-p{i}", "prefill", model, [*ec_args, *extra])
        out.services.append(service)
        out.prefill.append(endpoint)

    role = "both" if disable_prefill else "decode"
    if urls:
        decoders = topology.backend.endpoints("decode")
    else:
        decoders = []
        for i in range(max(1, topology.decode)):
            service, endpoint = instance(topology, ports, f"vllm-d{i}", role, model, [*ec_args, *extra])
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
        if stream_first_token:
            args += ["--stream-first-token"]
        out.services.append(ServiceSpec(f"pd-sidecar-{i}", "eppkit.services.pd_sidecar", sidecar_port, args))
        out.routable.append(Endpoint(decoder.name, "127.0.0.1", sidecar_port, role, decoder.model or model))
    return out
