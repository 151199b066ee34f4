"""external-epp: an EPP of your own (any ext_proc server speaking the GAIE EPP protocol) behind the kit's Envoy.

Either the kit starts and stops it (``epp_command``, a command-line template; its log is ``epp.log``
in the run folder, like every component's), from its image when given (``epp_image``: ``epp_command`` then holds
the arguments after the image's entrypoint, as ``docker run IMAGE ARGS``; on the docker and kubernetes runtimes),
or it is already running (``epp_address``). Envoy's side
is the ext_proc modes' (envoy/ext_proc.yaml.j2, the picked cluster of envoy/_picked.j2), so what
the kit checks, traces and compares is the same as for its own EPP.

Options (:class:`ExternalEppOptions`; the Envoy-side ext_proc ones of
:class:`eppkit.modes.ext_proc.EnvoyExtProcOptions`, ``failure_mode_allow``, ``body_routing``, ``tracing``):

| key | default | meaning |
|---|---|---|
| ``epp_command`` | "" | the EPP's command line, with placeholders (below); the kit starts it |
| ``epp_image`` | "" | the EPP's image: ``epp_command`` runs in it (after its entrypoint), a container (docker) or a Pod (kubernetes, in-cluster) |
| ``epp_address`` | "" | ``host:port`` of an EPP already running (exactly one of it and ``epp_command``) |
| ``epp_env`` | {} | more environment for the started EPP |
| ``crds`` | [] | CRD manifest files the control plane gets before the EPP starts (a controller EPP's own kinds) |
| ``max_fallbacks`` | 2 | how many fallbacks after the primary Envoy tries (the EPP's list) |
| ``decision_span`` | "" | the EPP's span that holds its decision, ``service:name``: trace checks find it (``request_path``, expected spans, compare) |

Placeholders in ``epp_command`` (Python ``str.format``): ``{grpc_port}`` (ext_proc, the port Envoy
connects to), ``{health_port}`` (grpc.health.v1; readiness waits for SERVING there, or on the gRPC
port when the command does not use it), ``{metrics_port}``, ``{endpoints}`` (the pool,
``host:port,host:port``), ``{named_endpoints}`` (``name=host:port,...``), ``{kv_events}`` (where each mock publishes
its KV-cache events, ``name=tcp://host:port,...``: Topology.kv_events), ``{pod_roles}`` (each pod's ``llm-d.ai/role``,
``host:port=role,...``: ``prefill`` and ``decode`` in flow pd-pool, else ``both``), and for a controller EPP that
watches an InferencePool: ``{kubeconfig}`` (a kubeconfig file of the testbed's Kubernetes control plane),
``{pool_name}``, ``{pool_namespace}``. A command that uses any of these three gets the control plane: the
testbed's namespace holds the InferencePool and one Pod per mock (each on its own loopback address, all on
one target port), and ``KUBECONFIG`` is set too. The started EPP gets the standard OpenTelemetry
environment (OTLP over gRPC to the testbed's Jaeger, every trace sampled, service name ``epp``). An EPP
already running is ready when its port accepts connections.
"""

from __future__ import annotations

import os
import shlex
import string
from pathlib import Path
from dataclasses import dataclass, field

from eppkit.modes.ext_proc import EnvoyExtProcOptions, envoy_vars
from eppkit.modes.options import CommonOptions, FailOpenOptions
from eppkit.modes.registry import Mode, register
from eppkit.observability.contract import Cluster, Envoy, Service
from eppkit.plan import Endpoint, ModePlan, PoolTarget, ServiceSpec
from eppkit.services.picker.endpoints import format_kv_events
from eppkit.services.picker.roles import format_roles

POOL_PLACEHOLDERS = ("kubeconfig", "pool_name", "pool_namespace")  # any of them: the EPP watches an InferencePool
# What an EPP of yours as an image that watches its pool may read in its namespace when it runs in a cluster (the
# kubernetes runtime: its own ServiceAccount): its Pods and the Gateway API Inference Extension's kinds.
IMAGE_RBAC = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]},
    {"apiGroups": ["inference.networking.k8s.io", "inference.networking.x-k8s.io"], "resources": ["*"],
     "verbs": ["get", "watch", "list"]},
)
PLACEHOLDERS = ("grpc_port", "health_port", "metrics_port", "endpoints", "named_endpoints", "kv_events",
                "pod_roles", *POOL_PLACEHOLDERS)


@dataclass
class ExternalEppOptions(CommonOptions, FailOpenOptions, EnvoyExtProcOptions):
    epp_command: str = ""
    epp_image: str = ""
    epp_address: str = ""
    epp_env: dict = field(default_factory=dict)
    crds: list = field(default_factory=list)
    max_fallbacks: int = 2
    # The EPP's own span that holds its decision, "service:name" (e.g. "myepp:myepp.pick"): trace checks then
    # find it (request_path's decision, the expected spans, compare's decision step).
    decision_span: str = ""

    def validate(self) -> "ExternalEppOptions":
        if bool(self.epp_command) == bool(self.epp_address):
            raise ValueError("give exactly one of epp_command (the kit starts it) and epp_address (host:port, running)")
        if self.epp_image and not self.epp_command:
            raise ValueError("epp_image runs epp_command's arguments after the image's entrypoint: give epp_command "
                             "too (at least {grpc_port}, the port Envoy connects to)")
        if self.epp_command:
            used = command_placeholders(self.epp_command)
            unknown = sorted(used - set(PLACEHOLDERS))
            if unknown:
                raise ValueError(f"epp_command: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
                                 f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
            if "grpc_port" not in used:
                raise ValueError("epp_command must use {grpc_port}: the port Envoy connects to")
        else:
            split_address(self.epp_address)
        if self.max_fallbacks < 0:
            raise ValueError("max_fallbacks cannot be negative")
        self.check_request_body()
        if self.crds and not watches_pool(self):
            raise ValueError("crds go into the control plane of a controller EPP: its epp_command must use "
                             "{kubeconfig}, {pool_name} or {pool_namespace}")
        missing = [str(f) for f in self.crds if not Path(f).is_file()]
        if missing:
            raise ValueError(f"crds: no such file: {', '.join(missing)}")
        if self.decision_span:
            split_span(self.decision_span)
        return self


def split_span(value: str) -> tuple[str, str]:
    """``"service:name"`` as (service, name); ValueError otherwise."""
    service, sep, name = value.partition(":")
    if not sep or not service.strip() or not name.strip():
        raise ValueError(f"decision_span {value!r}: give service:span, e.g. myepp:myepp.pick")
    return service.strip(), name.strip()


def command_placeholders(template: str) -> set[str]:
    """The ``{name}`` fields of a command template."""
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"epp_command: {exc}") from None


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as (host, port); ValueError otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"epp_address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def watches_pool(options: ExternalEppOptions) -> bool:
    """A command that uses {kubeconfig}, {pool_name} or {pool_namespace} starts a controller EPP."""
    return bool(options.epp_command) and bool(command_placeholders(options.epp_command) & set(POOL_PLACEHOLDERS))


def epp_command(template: str, ports: dict[str, int], backends: list[Endpoint], pool: PoolTarget | None = None, *,
                on_host: bool = True) -> list[str]:
    """The command line: ``template`` with its placeholders filled, split as a shell would. On this host, a program
    named by a relative path (``./my-epp``, ``.venv/bin/python``) is the one in the directory the kit was run from:
    the EPP itself runs in the testbed's run folder (where its log is), as every component does."""
    values = {**ports, "endpoints": ",".join(ep.address for ep in backends),
              "named_endpoints": ",".join(f"{ep.name}={ep.address}" for ep in backends),
              "kv_events": format_kv_events(backends), "pod_roles": format_roles(backends)}
    if pool is not None:
        values.update(kubeconfig=pool.kubeconfig, pool_name=pool.name, pool_namespace=pool.namespace)
    argv = shlex.split(template.format(**values))
    if on_host and argv and "/" in argv[0] and not os.path.isabs(argv[0]):
        argv[0] = os.path.abspath(argv[0])
    return argv


def plan(topology, options: ExternalEppOptions, ports, backends, pools=None, kube: PoolTarget | None = None) -> ModePlan:
    if options.epp_address:
        host, port = split_address(options.epp_address)
        return ModePlan(envoy_vars=envoy_vars(topology, options, backends, port, epp_host=host))
    if watches_pool(options) and kube is None:
        raise ValueError("mode external-epp: a command with {kubeconfig}/{pool_name}/{pool_namespace} needs the "
                         "testbed's control plane (PoolTarget)")
    numbers = {"grpc_port": ports.port(), "health_port": ports.port(), "metrics_port": ports.port()}
    health = numbers["health_port"] if "health_port" in command_placeholders(options.epp_command) else numbers["grpc_port"]
    env = {k: str(v) for k, v in options.epp_env.items()}
    if kube is not None:
        env.setdefault("KUBECONFIG", kube.kubeconfig)
    epp = ServiceSpec(name=Service.EPP, module="", port=numbers["grpc_port"], health_path=None,
                      argv=epp_command(options.epp_command, numbers, backends, kube, on_host=not options.epp_image),
                      grpc_health_port=health,
                      env=env, standard_otel=True, on_host=not options.epp_image, image=options.epp_image or None,
                      kube_rbac=IMAGE_RBAC if kube is not None and options.epp_image else ())
    return ModePlan(services=[epp], envoy_vars=envoy_vars(topology, options, backends, epp.port),
                    crds=[str(Path(f).resolve()) for f in options.crds])


# The EPP's own spans are its business (an upstream EPP may start its own trace): what every request
# holds for sure is Envoy's call to it.
MODE = register(Mode(
    name="external-epp", summary="an EPP of your own (a command the kit starts, or host:port) over ext_proc", order=5,
    template="ext_proc.yaml.j2", options=ExternalEppOptions, plan=plan, color="#8c564b",
    pickers=(Service.EPP,), picker_call=Envoy.EXT_PROC_CALL, spans=((Service.ENVOY, Envoy.EXT_PROC_CALL),),
    upstream=Envoy.router(Cluster.PICKED), fallback_upstream=Envoy.router(Cluster.POOL), external=True,
    kubernetes=watches_pool,
))
