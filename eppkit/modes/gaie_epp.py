"""gaie-epp: the upstream GAIE EPP v1.5.0 (Gateway API Inference Extension ``cmd/epp``) behind the kit's Envoy.

The kit builds the EPP once into its cache (:mod:`eppkit.builds.gaie`; ``eppkit bootstrap --all`` or the first
testbed of this mode). The EPP is a Kubernetes controller: it watches its InferencePool and the Pods the
pool selects in a real kube-apiserver, the testbed's control plane (:mod:`eppkit.components.controlplane`,
the Mode trait ``kubernetes``), where the testbed has its own namespace with the pool and one Pod per mock
vLLM. The pods of an InferencePool share one target port, so each mock listens on its own loopback address
(127.0.0.2, 127.0.0.3, ...) on the same port. Envoy's side is the ext_proc modes' (envoy/ext_proc.yaml.j2).

Options (:class:`GaieEppOptions`; plus the Envoy-side ext_proc ones, ``failure_mode_allow``, ``tracing``):

| key | default | meaning |
|---|---|---|
| ``conformance`` | False | GAIE's conformance EndpointPickerConfig: ``test-epp-endpoint-selection`` decides, a request without it gets 429 |
| ``epp_config`` | "" | an EndpointPickerConfig file of your own (empty: the EPP's built-in default plugins) |
| ``flow_control`` | False | its ``flowControl`` feature gate on, over its default scorers: requests queue while the pool is saturated, taking turns between flows of a band (``round-robin-fairness-policy``) |
| ``default_request_ttl`` | 60.0 | with ``flow_control``: seconds a queued request may wait (its ``flowControl.defaultRequestTTL``) |
| ``refresh_metrics_interval`` | "200ms" | how often the EPP scrapes each mock's /metrics (its own default, 50ms, is 20 scrapes/s per pod) |
| ``epp_args`` | [] | more flags for the EPP |
| ``max_fallbacks`` | 2 | how many fallbacks after the primary Envoy tries (the EPP's list) |

Tracing, honestly: v1.5.0 exports its spans (``gateway.request`` > ``gateway.request_orchestration``,
service ``gaie-epp``) as a trace of its own for every request; it reads no trace context from
Envoy. A request's trace therefore holds Envoy's call to the EPP but not the EPP's spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eppkit.builds import gaie as gaie_build
from eppkit.core.progress import say
from eppkit.modes.ext_proc import EnvoyExtProcOptions, envoy_vars
from eppkit.modes.options import CommonOptions, FailOpenOptions
from eppkit.modes.registry import Mode, register
from eppkit.observability.contract import Cluster, Envoy, Service
from eppkit.plan import CONTROLLER_RBAC as RBAC
from eppkit.plan import ModePlan, PoolTarget, ServiceSpec

OTEL_SERVICE = "gaie-epp"  # the EPP's spans in Jaeger (its own traces)
# The EPP's span names in v1.5.0: the ext_proc stream, and its scheduling step under it.
SPAN_REQUEST, SPAN_SCHEDULING = "gateway.request", "gateway.request_orchestration"

# GAIE's conformance setup (the idea of its conformance suite's EPP config): the test header filter
# decides, the picker returns the primary and one fallback, and the served endpoint is verified.
CONFORMANCE_CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: header-based-testing-filter
- type: destination-endpoint-served-verifier
- type: max-score-picker
  parameters:
    maxNumOfEndpoints: 2
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: header-based-testing-filter
  - pluginRef: max-score-picker
"""


def flow_control_config(ttl_s: float) -> str:
    """The EPP's default scorers (weights as v1.5.0 sets them) with its flowControl feature gate and a TTL."""
    return f"""\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates:
- flowControl
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: round-robin-fairness-policy
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
flowControl:
  defaultRequestTTL: {ttl_s:g}s
  defaultPriorityBand:
    fairnessPolicyRef: round-robin-fairness-policy
"""


@dataclass
class GaieEppOptions(CommonOptions, FailOpenOptions, EnvoyExtProcOptions):
    conformance: bool = False
    epp_config: str = ""
    flow_control: bool = False
    default_request_ttl: float = 60.0
    refresh_metrics_interval: str = "200ms"
    epp_args: list = field(default_factory=list)
    max_fallbacks: int = 2

    def validate(self) -> "GaieEppOptions":
        if sum((self.conformance, bool(self.epp_config), self.flow_control)) > 1:
            raise ValueError("conformance, epp_config and flow_control are each an EndpointPickerConfig: give one "
                             "(your own epp_config can turn flowControl on itself)")
        if self.default_request_ttl <= 0:
            raise ValueError("default_request_ttl must be more than 0 seconds")
        if self.max_fallbacks < 0:
            raise ValueError("max_fallbacks cannot be negative")
        # v1.5.0 reads the body as it streams and answers it as streamed mutations (the EPP protocol's way).
        self.check_request_body(allowed=("streamed",))
        return self


def epp_argv(binary: str, options: GaieEppOptions, ports: dict[str, int], pool: PoolTarget) -> list[str]:
    # Its log is JSON whatever --zap-encoder says (v1.5.0 builds its logger before it parses flags).
    argv = [binary, "--pool-name", pool.name, "--pool-namespace", pool.namespace,
            "--grpc-port", str(ports["grpc"]), "--grpc-health-port", str(ports["health"]),
            "--metrics-port", str(ports["metrics"]),
            # Plaintext h2 to Envoy's epp cluster; /metrics without TokenReview (anyone on loopback may scrape it).
            "--secure-serving=false", "--metrics-endpoint-auth=false", "--enable-pprof=false",
            "--refresh-metrics-interval", options.refresh_metrics_interval]
    if options.conformance:
        argv += ["--config-text", CONFORMANCE_CONFIG]
    elif options.epp_config:
        argv += ["--config-file", options.epp_config]
    elif options.flow_control:
        argv += ["--config-text", flow_control_config(options.default_request_ttl)]
    return argv + [str(a) for a in options.epp_args]


def plan(topology, options: GaieEppOptions, ports, backends, pools=None, kube: PoolTarget | None = None) -> ModePlan:
    if kube is None:
        raise ValueError("mode gaie-epp: the GAIE EPP watches an InferencePool; the testbed gives it one (PoolTarget)")
    binary = gaie_build.build(say)  # cached: a path at once; else builds, with progress
    numbers = {"grpc": ports.port(), "health": ports.port(), "metrics": ports.port()}
    epp = ServiceSpec(name=Service.EPP, module="", port=numbers["grpc"], health_path=None,
                      argv=epp_argv(str(binary), options, numbers, kube), grpc_health_port=numbers["health"],
                      env={"KUBECONFIG": kube.kubeconfig, "OTEL_SERVICE_NAME": OTEL_SERVICE}, standard_otel=True,
                      kube_rbac=RBAC)
    return ModePlan(services=[epp], envoy_vars=envoy_vars(topology, options, backends, epp.port))


# Its spans are a trace of their own (see the module doc): what every request's trace holds is
# Envoy's call to it.
MODE = register(Mode(
    name="gaie-epp", summary="the upstream GAIE EPP v1.5.0 (built once; it watches its InferencePool in a real "
    "kube-apiserver) over ext_proc",
    order=6, template="ext_proc.yaml.j2", options=GaieEppOptions, plan=plan, color="#e377c2",
    pickers=(Service.EPP,), picker_call=Envoy.EXT_PROC_CALL, spans=((Service.ENVOY, Envoy.EXT_PROC_CALL),),
    upstream=Envoy.router(Cluster.PICKED), fallback_upstream=Envoy.router(Cluster.POOL), external=True,
    kubernetes=True, own_trace_service=OTEL_SERVICE,
    flows=("aggregated",), flows_why="the GAIE EPP v1.5.0 schedules one pool of model servers",
))
