"""sidecar: the EPP asks the frontend sidecar (``services.frontend``) for every decision.

The Dynamo proposal for the Gateway API Inference Extension: the EPP forwards the request body
to the frontend with ``x-routing-request: true``; the frontend tokenizes, routes with the
configured scorer (``kv-router-scorer`` is Dynamo's KV router) and answers the worker; the EPP
sets ``x-gateway-destination-endpoint`` and ``x-gateway-worker-id``. Envoy's side is the ext_proc
one. Both services get the picker settings through the same flags: the frontend scores the
decoders, the EPP keeps the force and shed hooks and picks the prefillers and encoders (pd, epd,
ttft) with a scorer of the same type.

Options: those of :class:`eppkit.modes.ext_proc.ExtProcOptions`, plus ``frontend_args`` (extra
command-line arguments for the frontend) and ``frontend_disabled`` (do not start the frontend;
the EPP still points at its port).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eppkit.modes._pickers import picker_service
from eppkit.modes.ext_proc import EPP_SPANS, ExtProcOptions, envoy_vars, epp_service
from eppkit.modes.registry import Mode, register
from eppkit.observability.contract import Cluster, Envoy, Epp, Frontend, Service
from eppkit.plan import ModePlan


@dataclass
class SidecarOptions(ExtProcOptions):
    frontend_args: list = field(default_factory=list)
    frontend_disabled: bool = False

    def validate(self) -> SidecarOptions:
        super().validate()
        if self.epp_watch_pool:
            raise ValueError("epp_watch_pool: the sidecar mode's decisions are its frontend's, which reads a pool "
                             "list; the EPP that watches an InferencePool is mode ext_proc's")
        return self


def plan(topology, options: SidecarOptions, ports, backends, pools=None, kube=None) -> ModePlan:
    frontend_port, epp_port = ports.port(), ports.port()
    services = []
    if not options.frontend_disabled:
        services.append(picker_service("frontend", "eppkit.services.frontend", frontend_port, options, backends, pools,
                                       stages=False, extra=options.frontend_args))
    if not options.epp_disabled:
        services.append(epp_service(topology, options, epp_port, backends, pools,
                                    frontend_url=f"http://127.0.0.1:{frontend_port}"))
    return ModePlan(services=services, envoy_vars=envoy_vars(topology, options, backends, epp_port))


MODE = register(Mode(
    name="sidecar", summary="the EPP asks a frontend sidecar (tokenize + route) over HTTP: the Dynamo proposal",
    order=2, template="sidecar.yaml.j2", options=SidecarOptions, plan=plan, color="#9467bd",
    pickers=(Service.EPP, Service.FRONTEND), picker_span=Epp.PROCESS, picker_call=Envoy.EXT_PROC_CALL,
    decision=(Service.FRONTEND, Frontend.ROUTE),
    spans=EPP_SPANS + ((Service.FRONTEND, Frontend.ROUTE), (Service.FRONTEND, Frontend.TOKENIZE)),
    upstream=Envoy.router(Cluster.PICKED), fallback_upstream=Envoy.router(Cluster.POOL), health_aware=True,
))
