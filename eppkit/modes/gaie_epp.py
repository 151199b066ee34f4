"""gaie-epp: the upstream GAIE EPP v1.5.0 (Gateway API Inference Extension ``cmd/epp``) behind the kit's Envoy.

The kit builds the EPP once into its cache (:mod:`eppkit.builds.gaie`; ``eppkit bootstrap`` or the first
testbed of this mode). The EPP insists on a Kubernetes API server for its pool, so the testbed also
starts the kit's fake one (``eppkit.services.fake_kube``) with one Pod per mock vLLM and one
InferencePool. The pods of an InferencePool share one target port, so in this mode each mock listens
on its own loopback address (127.0.0.2, 127.0.0.3, ...) on the same port (the Mode trait
``pod_addresses``). Envoy's side is the ext_proc modes' (envoy/ext_proc.yaml.j2).

Options (:class:`GaieEppOptions`; plus the Envoy-side ext_proc ones, ``failure_mode_allow``, ``tracing``):

| key | default | meaning |
|---|---|---|
| ``conformance`` | False | GAIE's conformance EndpointPickerConfig: ``test-epp-endpoint-selection`` decides, a request without it gets 429 |
| ``epp_config`` | "" | an EndpointPickerConfig file of your own (empty: the EPP's built-in default plugins) |
| ``refresh_metrics_interval`` | "200ms" | how often the EPP scrapes each mock's /metrics (its own default, 50ms, is 20 scrapes/s per pod) |
| ``epp_args`` | [] | more flags for the EPP |
| ``max_fallbacks`` | 2 | how many fallbacks after the primary Envoy tries (the EPP's list) |

Tracing, honestly: v1.5.0 exports its spans (``gateway.request`` > ``gateway.request_orchestration``,
service ``gaie-epp``) as a trace of its own for every request; it reads no trace context from
Envoy. A request's trace therefore holds Envoy's call to the EPP but not the EPP's spans.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from eppkit.builds import gaie as gaie_build
from eppkit.modes.ext_proc import EnvoyExtProcOptions, envoy_vars
from eppkit.modes.options import CommonOptions, FailOpenOptions
from eppkit.modes.registry import Mode, register
from eppkit.observability.contract import Cluster, Envoy, Service
from eppkit.plan import Endpoint, ModePlan, ServiceSpec

NAMESPACE = "default"
POOL = "vllm-pool"
KUBE_API = "kube-api"  # the fake Kubernetes API server's service name (its log: kube-api.log)
KUBECONFIG = "kubeconfig"  # written by the fake API into the run folder, the EPP's working directory
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


@dataclass
class GaieEppOptions(CommonOptions, FailOpenOptions, EnvoyExtProcOptions):
    conformance: bool = False
    epp_config: str = ""
    refresh_metrics_interval: str = "200ms"
    epp_args: list = field(default_factory=list)
    max_fallbacks: int = 2

    def validate(self) -> "GaieEppOptions":
        if self.conformance and self.epp_config:
            raise ValueError("conformance and epp_config are two EndpointPickerConfigs: give one")
        if self.max_fallbacks < 0:
            raise ValueError("max_fallbacks cannot be negative")
        return self


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def epp_argv(binary: str, options: GaieEppOptions, ports: dict[str, int]) -> list[str]:
    argv = [binary, "--pool-name", POOL, "--pool-namespace", NAMESPACE,
            "--grpc-port", str(ports["grpc"]), "--grpc-health-port", str(ports["health"]),
            "--metrics-port", str(ports["metrics"]),
            # Plaintext h2 to Envoy's epp cluster; no kube authz in front of /metrics (the fake API has none).
            "--secure-serving=false", "--metrics-endpoint-auth=false", "--enable-pprof=false",
            "--refresh-metrics-interval", options.refresh_metrics_interval, "--zap-encoder", "console"]
    if options.conformance:
        argv += ["--config-text", CONFORMANCE_CONFIG]
    elif options.epp_config:
        argv += ["--config-file", options.epp_config]
    return argv + [str(a) for a in options.epp_args]


def fake_kube_args(backends: list[Endpoint], epp_port: int) -> list[str]:
    ports = {ep.port for ep in backends}
    if len(ports) != 1:
        raise ValueError(f"the pods of an InferencePool share one target port; got {sorted(ports)}")
    args = ["--namespace", NAMESPACE, "--pool-name", POOL, "--target-port", str(ports.pop()),
            "--epp-port", str(epp_port), "--kubeconfig-out", KUBECONFIG]
    for ep in backends:
        args += ["--pod", f"{ep.name}={ep.host}"]
    return args


def plan(topology, options: GaieEppOptions, ports, backends, pools=None) -> ModePlan:
    binary = gaie_build.build(_progress)  # cached: a path at once; else builds, with progress
    numbers = {"grpc": ports.port(), "health": ports.port(), "metrics": ports.port()}
    kube = ServiceSpec(name=KUBE_API, module="eppkit.services.fake_kube", port=ports.port(),
                       args=fake_kube_args(backends, numbers["grpc"]))
    epp = ServiceSpec(name=Service.EPP, module="", port=numbers["grpc"], health_path=None,
                      argv=epp_argv(str(binary), options, numbers), grpc_health_port=numbers["health"],
                      env={"KUBECONFIG": KUBECONFIG, "OTEL_SERVICE_NAME": OTEL_SERVICE}, standard_otel=True, tier=1)
    return ModePlan(services=[kube, epp], envoy_vars=envoy_vars(topology, options, backends, epp.port))


# Its spans are a trace of their own (see the module doc): what every request's trace holds is
# Envoy's call to it.
MODE = register(Mode(
    name="gaie-epp", summary="the upstream GAIE EPP v1.5.0 (built once; its pool from a fake Kubernetes API) over ext_proc",
    order=6, template="ext_proc.yaml.j2", options=GaieEppOptions, plan=plan, color="#e377c2",
    pickers=(Service.EPP,), picker_call=Envoy.EXT_PROC_CALL, spans=((Service.ENVOY, Envoy.EXT_PROC_CALL),),
    upstream=Envoy.router(Cluster.PICKED), fallback_upstream=Envoy.router(Cluster.POOL), external=True,
    pod_addresses=True, own_trace_service=OTEL_SERVICE,
    flows=("aggregated",), flows_why="the GAIE EPP v1.5.0 schedules one pool of model servers",
))
