"""ext_proc: the EPP (``services.epp``) picks each request's endpoint over Envoy's ext_proc protocol.

Options (:class:`ExtProcOptions`; the picker core's settings, ``failure_mode_allow``, ``body_routing``
and ``tracing`` come from :class:`eppkit.modes.options.PickerOptions`):

| key | default | meaning |
|---|---|---|
| ``epp_status_on_error`` | None | HTTP status Envoy answers when the EPP fails and it fails closed (Envoy: 500) |
| ``epp_message_timeout_ms`` | 10000 | Envoy's per-message wait for the EPP (not armed by Envoy 1.40 in FULL_DUPLEX_STREAMED) |
| ``epp_keepalive_ms`` | 0 | HTTP/2 PING interval and timeout on the EPP connection: a hung EPP fails its requests (500) after twice this; 0: off |
| ``epp_health_check_interval_ms`` | 500 | Envoy's TCP health check of the EPP; 0: none (then fail-open cannot work for requests with a body, see docs/modes-ext_proc.md) |
| ``epp_process_response`` | False | also send response headers/body through the EPP |
| ``epp_request_body`` | ``streamed`` | how Envoy sends the request body to the EPP: ``streamed`` (FULL_DUPLEX_STREAMED, the EPP protocol's), ``buffered`` (BUFFERED, one message), ``none`` (NONE: the EPP decides on the headers) |
| ``epp_subset_hint`` | None | the EPP protocol's subset hint on every request: ``["ip:port", ...]`` or ``"ip:port,ip:port"``; an entry naming a backend (``vllm-1``) is its address |
| ``epp_disabled`` | False | do not start the EPP (Envoy still points at its port): the EPP-down case |
| ``epp_args`` | [] | extra command-line arguments for the EPP |
| ``epp_watch_pool`` | False | the EPP learns its pool as GAIE's does, from an InferencePool and its Pods in the testbed's control plane, and reads the pool's InferenceObjectives there (a sheddable request's priority) |
| ``multipart_trigger`` | ``first-token`` | multipart flow: part 2 on a streamed request's first token, or always on the response ``headers`` |

Flows: in pd / epd / ttft the EPP also gets the prefill and encoder pools and names them in
``x-prefiller-host-port`` / ``x-encoder-hosts-ports``. In ``multipart`` the EPP runs the two-phase
flow (``--multipart``) and Envoy sends it the response headers and body (the EPP must see the
response headers to inject part 2), whatever ``epp_process_response`` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eppkit.gateway.body_routing import body_routing_vars
from eppkit.modes._pickers import picked_vars, picker_service
from eppkit.modes.options import PickerOptions
from eppkit.modes.registry import Mode, register
from eppkit.observability.contract import Cluster, Envoy, Epp, Service
from eppkit.plan import CONTROLLER_RBAC, Endpoint, ModePlan, PoolTarget, ServiceSpec
from eppkit.services.epp import BODY_PATHS, MULTIPART_TRIGGERS, REQUEST_BODY


@dataclass
class EnvoyExtProcOptions:
    """How Envoy talks to an EPP over ext_proc: every mode with an EPP (the kit's or an upstream one)."""

    epp_status_on_error: int | None = None
    epp_message_timeout_ms: int = 10000
    epp_keepalive_ms: int = 0
    epp_health_check_interval_ms: int = 500
    epp_process_response: bool = False
    # The EPP protocol's subset hint on every request (envoy.lb.subset_hint): a list of "ip:port", or the
    # same as one comma-separated string; None: none (the EPP picks from its whole pool).
    epp_subset_hint: list | str | None = None
    # How Envoy sends the request body to the EPP (eppkit.services.epp.REQUEST_BODY): streamed, buffered, none.
    epp_request_body: str = BODY_PATHS[0]

    def check_request_body(self, *, allowed: tuple[str, ...] = BODY_PATHS) -> None:
        """ValueError unless ``epp_request_body`` is one of ``allowed`` (what the mode's EPP can take)."""
        if self.epp_request_body not in allowed:
            raise ValueError(f"epp_request_body {self.epp_request_body!r}: this mode takes "
                             f"{', '.join(allowed)} (of {', '.join(BODY_PATHS)})")


@dataclass
class ExtProcOptions(PickerOptions, EnvoyExtProcOptions):
    epp_disabled: bool = False
    epp_args: list = field(default_factory=list)
    multipart_trigger: str = MULTIPART_TRIGGERS[0]
    # The EPP is a controller, as GAIE's: its pool and InferenceObjectives from the testbed's control plane.
    epp_watch_pool: bool = False

    def validate(self) -> "ExtProcOptions":
        super().validate()
        if self.multipart_trigger not in MULTIPART_TRIGGERS:
            raise ValueError(f"multipart_trigger must be one of {', '.join(MULTIPART_TRIGGERS)}")
        self.check_request_body()
        return self


def epp_service(topology, options: ExtProcOptions, port: int, backends: list[Endpoint], pools,
                *, frontend_url: str | None = None, kube: PoolTarget | None = None) -> ServiceSpec:
    """The EPP's start spec; in sidecar mode (``frontend_url``) it asks that frontend for decoders; with ``kube``
    it learns its pool (and the pool's InferenceObjectives) from that InferencePool instead of a list."""
    extra: list[str] = []
    if kube is not None:
        extra += ["--kubeconfig", kube.kubeconfig, "--pool-namespace", kube.namespace, "--pool-name", kube.name]
        backends = []
    if frontend_url is not None:
        extra += ["--frontend-url", frontend_url]
    if topology.flow == "multipart":
        extra += ["--multipart", "--multipart-trigger", options.multipart_trigger]
    if options.epp_request_body != BODY_PATHS[0]:
        extra += ["--request-body", options.epp_request_body]
    spec = picker_service("epp", "eppkit.services.epp", port, options, backends, pools,
                          extra=[*extra, *options.epp_args], health_path=None)  # gRPC: the testbed waits for the port
    if kube is not None:
        spec.kube_rbac = CONTROLLER_RBAC
    return spec


def envoy_vars(topology, options: ExtProcOptions, backends: list[Endpoint], epp_port: int,
               epp_host: str = "127.0.0.1") -> dict[str, Any]:
    """The ext_proc template's variables (the EPP at ``epp_host:epp_port``: an IP, or a name Envoy resolves)."""
    multipart = topology.flow == "multipart"
    if multipart and options.epp_request_body != BODY_PATHS[0]:
        raise ValueError(f"the multipart flow needs the request body streamed through the EPP; "
                         f"epp_request_body is {options.epp_request_body!r}")
    return {
        **body_routing_vars(options.body_routing, backends),
        "epp_host": epp_host,
        "epp_port": epp_port,
        "epp_status_on_error": options.epp_status_on_error,
        "failure_mode_allow": options.failure_mode_allow,
        "epp_message_timeout_ms": options.epp_message_timeout_ms,
        "epp_process_response": options.epp_process_response or multipart,
        "epp_multipart": multipart,
        **picked_vars(options.max_fallbacks),
        "epp_health_check_interval_ms": options.epp_health_check_interval_ms,
        "epp_keepalive_ms": options.epp_keepalive_ms,
        "epp_subset_hint": subset_hint(options.epp_subset_hint, backends),
        "epp_request_body_mode": REQUEST_BODY[options.epp_request_body],
    }


def subset_hint(hint: list | str | None, backends: list[Endpoint]) -> list | str | None:
    """The subset hint with each entry that names a backend ("vllm-1") as that backend's "ip:port"; other
    entries as they are (an address outside the pool is how a test asks for "no endpoint fits")."""
    if hint is None:
        return None
    by_name = {ep.name: ep.address for ep in backends}
    items = hint.split(",") if isinstance(hint, str) else list(hint)
    resolved = [by_name.get(str(item).strip(), str(item).strip()) for item in items]
    return ",".join(resolved) if isinstance(hint, str) else resolved


def plan(topology, options: ExtProcOptions, ports, backends, pools=None, kube=None) -> ModePlan:
    epp_port = ports.port()
    services = [] if options.epp_disabled else [epp_service(topology, options, epp_port, backends, pools, kube=kube)]
    return ModePlan(services=services, envoy_vars=envoy_vars(topology, options, backends, epp_port))


EPP_SPANS = ((Service.ENVOY, Envoy.EXT_PROC_CALL), (Service.EPP, Epp.PROCESS), (Service.EPP, Epp.PICK),
             (Service.EPP, Epp.INJECT))

MODE = register(Mode(
    name="ext_proc", summary="the EPP decides over Envoy's ext_proc gRPC stream (the GAIE EPP protocol)", order=1,
    template="ext_proc.yaml.j2", options=ExtProcOptions, plan=plan, color="#1f77b4",
    pickers=(Service.EPP,), picker_span=Epp.PROCESS, picker_call=Envoy.EXT_PROC_CALL, decision=(Service.EPP, Epp.PICK),
    spans=EPP_SPANS, upstream=Envoy.router(Cluster.PICKED), fallback_upstream=Envoy.router(Cluster.POOL),
    health_aware=True, kubernetes=lambda options: options.epp_watch_pool,
))
