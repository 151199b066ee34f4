"""A real vLLM as a testbed backend: the CPU build the kit installs, or your own vLLM by its command.

The kit's install (:mod:`eppkit.builds.vllm_cpu`; ``eppkit bootstrap --backend vllm``) is vllm-cpu 0.32.0 with
SmolLM2-135M-Instruct in fp32. Each pod is one ``vllm serve`` process on the pod's address, serving the
pod's model name (``VllmSpec.model``, ``mock-llm`` by default, so the same requests reach it as reach the
mocks), tracing into the testbed's Jaeger: one ``llm_request`` span per request (service ``vllm``,
``service.instance.id`` the pod's name), under Envoy's upstream span (vLLM honours ``traceparent``).

What it is given, and why (measured on a 2-core, 24 GB VM without a GPU; docs/bring-your-own-backend.md):

- ``--dtype float32 --enforce-eager``: the CPU build's only sane choice for a 135M model; at temperature 0 the
  text is then the same alone and batched.
- ``--max-model-len 2048`` and a 256 MiB KV cache: 3.6 GB of memory per server (a 1 GiB cache: 4.4 GB).
- ``--enable-prompt-tokens-details``: its usage says how many prompt tokens its prefix cache held, as the mock's.
- ``--enable-lora`` (one adapter slot, none loaded): vLLM exports ``vllm:lora_requests_info`` only then, and GAIE's
  EPP reads it (it logs an error on every scrape without it); measured: the same memory, text and start time.
- ``VLLM_CPU_OMP_THREADS_BIND``: pod *i*'s worker on core *i* modulo the cores; vLLM's ``auto`` binds every
  server's worker to core 0.
- nothing leaves the machine: ``VLLM_NO_USAGE_STATS``, ``DO_NOT_TRACK`` (else it posts usage statistics),
  ``HF_HUB_OFFLINE`` (the model is a local folder), ``VLLM_HOST_IP=127.0.0.1`` (else its internal sockets
  take the first interface's address).
- ``OTEL_BSP_SCHEDULE_DELAY``: its spans leave within 200 ms rather than the SDK's 5 s.

A server takes 30-90 s to be ready on a busy 2-core machine (three processes each import torch and vLLM):
tests and comparisons share them (:class:`~eppkit.runtimes.vllm_servers.ServerPool`).
It runs as a process of this host on every runtime: its environment's Python is this host's.

Your own vLLM (a GPU, another model): ``Backend(preset="vllm", command="vllm serve my/model --gpu-memory-utilization
0.3")`` (``--vllm-command``). The kit appends ``--host``, ``--port``, ``--served-model-name``, ``--seed`` and
``--otlp-traces-endpoint`` and sets the same tracing environment; the expectations are the same.
"""

from __future__ import annotations

import os
import shlex
from typing import Sequence

from eppkit.backends.registry import BackendKind, register
from eppkit.builds import vllm_cpu
from eppkit.core import procfs
from eppkit.observability.expected_spans import LLM_REQUEST
from eppkit.plan import ServiceSpec
from eppkit.services.openai_server.kvevents import KvEventsConfig

NAME = "vllm"
MODEL = vllm_cpu.MODEL
READY_PATH = "/health"  # refused until its HTTP server runs; 200 once the engine is up
START_TIMEOUT_S = 600.0  # measured 30-37 s at load 3-5, 70-112 s at load 8-11, over 300 s at load 25
MAX_MODEL_LEN = 2048
KV_CACHE_BYTES = 256 * 2**20
SERVER_GB = 3.7  # resident memory of one server with that cache (measured 3.62 GB RSS)
SPAN_DELAY_MS = 200

MISSING_HINT = f"`eppkit bootstrap --backend {NAME}`"


def version() -> str:
    return vllm_cpu.VLLM_VERSION


def require() -> vllm_cpu.Install:
    """The kit's install; FileNotFoundError saying how to get it (or that a half-finished one must be redone)."""
    return vllm_cpu.require()


def command(*, host: str, port: int, model: str | Sequence[str], seed: int, own: str = "",
            extra: Sequence[str] = ()) -> list[str]:
    """One server's argv: the kit's install (unless ``own``, your command) serving ``model`` on ``host:port``
    (several names: it serves each; answers name the first)."""
    names = [model] if isinstance(model, str) else list(model)
    if own:
        base = shlex.split(own)
    else:
        found = require()
        base = [str(found.vllm), "serve", str(found.model), "--dtype", "float32", "--enforce-eager",
                "--max-model-len", str(MAX_MODEL_LEN), "--kv-cache-memory-bytes", str(KV_CACHE_BYTES),
                "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens, as the mock reports
                "--enable-lora", "--max-loras", "1", "--max-lora-rank", "8"]  # vllm:lora_requests_info: GAIE's EPP reads it
    return [*base, "--host", host, "--port", str(port), "--served-model-name", *names, "--seed", str(seed),
            *map(str, extra)]


def kv_events_config(port: int, topic: str) -> str:
    """``--kv-events-config``: its KV-cache events on ``port`` (a ZeroMQ PUB; vLLM binds an endpoint only when it is a
    wildcard, so every interface: the port must be free on all), under ``topic``."""
    return KvEventsConfig.flag(f"tcp://*:{port}", topic)


def env(name: str, index: int, *, own: bool = False) -> dict[str, str]:
    """One server's environment: its trace identity, offline, its core (the kit's CPU install)."""
    out = {
        "OTEL_SERVICE_NAME": "vllm",  # the trace contract's service (Service.VLLM), as the mock's
        "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={name}",
        "OTEL_BSP_SCHEDULE_DELAY": str(SPAN_DELAY_MS),
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "PYTHONPATH": "",  # the kit's own must not leak into vLLM's environment
    }
    if own:
        return out
    cache = vllm_cpu.vllm_cache_dir()
    return {**out, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_CACHE_ROOT": str(cache / "vllm"), "HF_HOME": str(cache / "hf"),
            "VLLM_CPU_OMP_THREADS_BIND": str(index % (os.cpu_count() or 1))}


def service(name: str, index: int, *, host: str, port: int, model: str, seed: int, own: str = "",
            extra: list[str] = ()) -> ServiceSpec:
    """One server as a testbed service: a process of this host, ready when /health answers, traced
    into the testbed's Jaeger through ``--otlp-traces-endpoint``."""
    return ServiceSpec(name, NAME, port, host=host, health_path=READY_PATH, env=env(name, index, own=bool(own)),
                       argv=command(host=host, port=port, model=model, seed=seed, own=own, extra=extra),
                       otlp_flag="--otlp-traces-endpoint", start_timeout_s=START_TIMEOUT_S, on_host=True)


def check_memory(servers: int, own: str = "") -> None:
    """ValueError when ``servers`` of the kit's install would not fit in this machine's available memory."""
    if own or servers <= 0:
        return
    available = _available_gb()
    if available is not None and servers * SERVER_GB > available:
        raise ValueError(f"{servers} vLLM servers need about {servers * SERVER_GB:.0f} GB ({SERVER_GB} GB each); "
                         f"this machine has {available:.1f} GB available. Use fewer pods (--backends N).")


def _available_gb() -> float | None:
    kib = procfs.meminfo_kib("MemAvailable")
    return kib / 1e6 if kib is not None else None


def _label(backend) -> str:
    what = f"vLLM by your command ({backend.command.split()[0]})" if backend.command else f"vLLM {version()} serving {MODEL}"
    return f"external: {what} ({'started once, shared by the testbeds' if backend.running else 'started by the kit'})"


def _install(progress) -> str:
    found = vllm_cpu.install(progress)
    return f"vLLM {version()} at {found.vllm}, model {vllm_cpu.MODEL} at {found.model}"


def _require(backend) -> None:
    if not (backend.command or backend.running):
        require()


KIND = register(BackendKind(
    NAME, 20, "a real vLLM, traced: its CPU build and a small model, `eppkit bootstrap --backend vllm`", LLM_REQUEST,
    _label, server=lambda s: service(s.name, s.index, host=s.host, port=s.port, model=s.model, seed=s.seed,
                                     own=s.command, extra=list(s.extra)),
    aggregated_only=("its CPU build has no KV connector to hand prefill's KV to decode; for vLLMs with one, give "
                     "--prefill-url and --decode-url"),
    one_per_pod=f"the {NAME} preset runs one server per pod (pods_per_mock is the mock's)", shared=True, own_command=True,
    install=_install, install_beside=True, require=_require, check_pool=lambda backend, servers: check_memory(servers, backend.command)))
