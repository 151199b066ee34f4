"""What a testbed's plan is made of: the endpoints pickers choose from, how each service starts, what a mode adds.

Modes and flows produce these (eppkit.modes, eppkit.flows); the runtimes start them (eppkit.runtimes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Endpoint:
    """A started backend as the pickers see it."""

    name: str  # instance name, e.g. "vllm-0"; also what the mock reports in x-inference-pod
    host: str
    port: int
    role: str = "both"
    model: str = "mock-llm"
    kv_events: str | None = None  # its KV-cache events publisher (tcp://host:port), when Topology.kv_events

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


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
    host: str = "127.0.0.1"  # or a comma list (a mock serving many pods' addresses; ready on the first)
    # A program that is not a kit service (a backend binary, an external EPP): its whole command line
    # (then ``module`` and ``args`` are not used).
    argv: list[str] | None = None
    grpc_health_port: int | None = None  # ready when grpc.health.v1 answers SERVING on this port
    tier: int = 0  # a mode's services start tier by tier (0 first): a later tier needs an earlier one up
    # Also the standard OpenTelemetry environment (OTEL_EXPORTER_OTLP_ENDPOINT, ...; see standard_otel_env)
    standard_otel: bool = False
    # A program that takes the OTLP endpoint as a flag (vLLM's --otlp-traces-endpoint): the testbed appends
    # ``<otlp_flag> http://<its Jaeger's OTLP gRPC address>`` when tracing is on.
    otlp_flag: str | None = None
    # How long it may take to be ready at the least (a real vLLM: minutes); the mode's ready_timeout_s when longer.
    start_timeout_s: float | None = None
    # A program of yours (an EPP of your own) or a real vLLM: a process of this host on every runtime, in its own
    # environment (the kit's services image holds only the kit's own packages; a vLLM's Python is this host's).
    on_host: bool = False
    # A program of yours packaged as an image (an EPP's image): ``argv`` follows its entrypoint, as `docker run IMAGE
    # ARGS` and a Pod's ``args``; on the docker and kubernetes runtimes (the local runtime refuses it).
    image: str | None = None
    # A Kubernetes client (its KUBECONFIG env is the pool's kubeconfig): the API access it needs, as RBAC rules
    # (``{"apiGroups": [...], "resources": [...], "verbs": [...]}``). On a runtime that is a cluster it runs
    # in-cluster instead: a ServiceAccount of its own bound to a Role of exactly these rules, its token mounted.
    kube_rbac: tuple[dict, ...] = ()


# What a controller EPP may read in its namespace: GAIE's EPP, or the kit's watching its pool (GAIE's chart v1.5.0:
# config/charts/epplib/templates/_rbac.yaml and inferencepool/templates/rbac.yaml; its metrics auth, the chart's
# ClusterRole, is off here).
CONTROLLER_RBAC = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]},
    {"apiGroups": ["inference.networking.x-k8s.io"], "resources": ["inferenceobjectives", "inferencemodelrewrites"],
     "verbs": ["get", "watch", "list"]},
    {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": ["get", "watch", "list"]},
)


@dataclass(frozen=True)
class PoolTarget:
    """Where a mode's EPP finds its InferencePool: one namespace of the testbed's Kubernetes control plane.

    The runtime makes it before the mode's plan (only for a mode whose EPP watches a pool:
    :meth:`eppkit.modes.Mode.watches_pool`), and creates the pool and one Pod per backend before the EPP starts.
    """

    kubeconfig: str  # a file in the run folder (every service's working directory)
    namespace: str
    name: str = "vllm-pool"


@dataclass
class ModePlan:
    """What a mode adds to the testbed: its services and the variables its Envoy template needs."""

    services: list[ServiceSpec] = field(default_factory=list)
    envoy_vars: dict[str, Any] = field(default_factory=dict)
    envoy_env: dict[str, str] = field(default_factory=dict)  # e.g. ENVOY_DYNAMIC_MODULES_SEARCH_PATH
    # CRD manifests (files) to install into the control plane before the EPP starts: an EPP's own kinds.
    crds: list[str] = field(default_factory=list)
