"""dynmod-callout: a Go dynamic module asks the callout routing service for the endpoint.

The module (plugins/dynamic_module, filter ``eppkit_callout``) does what the Lua filter of
lua-callout does, with Envoy's async HTTP client from Go: buffer the body, POST it to the
callout's /pick, set the envoy.lb metadata and header x-gateway-destination-endpoint (the
picked cluster, envoy/_picked.j2), or pass the callout's
400/429/503 to the client, or fail closed (502) / open (pool). See docs/modes-dynmod.md.

The module is built on first use (``eppkit.builds.dynmod``: about 30-60 s cold, then cached;
``eppkit bootstrap`` builds it ahead). Envoy loads it by absolute path, so it needs no
environment variable.

Options: lua-callout's (:class:`eppkit.modes._callout.CalloutOptions`) and ``restrict_to_pool``
(the module refuses picks outside the backends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eppkit.builds import dynmod as dynmod_build
from eppkit.core.progress import say
from eppkit.gateway.body_routing import body_routing_vars
from eppkit.modes._callout import TRAITS, CalloutOptions, callout_names, callout_service
from eppkit.modes._pickers import picked_vars
from eppkit.modes.registry import Mode, register
from eppkit.observability.contract import Callout, Cluster, Dynmod, Service
from eppkit.plan import Endpoint, ModePlan


@dataclass
class DynmodOptions(CalloutOptions):
    restrict_to_pool: bool = False


def filter_config(options: DynmodOptions, backends: list[Endpoint]) -> dict[str, Any]:
    """The eppkit_callout filter's JSON config (plugins/dynamic_module/internal/callout/config.go)."""
    config: dict[str, Any] = {
        "cluster": Cluster.CALLOUT,
        "authority": Cluster.CALLOUT,
        "path": "/pick",
        "timeout_ms": options.callout_timeout_ms,
        "failure_mode_allow": options.failure_mode_allow,
        **callout_names(),
    }
    if options.restrict_to_pool:
        config["allowed_endpoints"] = [ep.address for ep in backends]
    return config


def plan(topology, options: DynmodOptions, ports, backends, pools=None, kube=None) -> ModePlan:
    callout = callout_service(options, ports.port(), backends, pools)
    lib = dynmod_build.build(progress=say)
    return ModePlan(
        services=[callout],
        envoy_vars={
            "callout_port": callout.port,
            "dynmod_path": str(lib),
            "dynmod_callout_config": filter_config(options, backends),
            **body_routing_vars(options.body_routing, backends),
            **picked_vars(options.max_fallbacks),
        },
    )


MODE = register(Mode(
    name="dynmod-callout", summary="a Go dynamic module POSTs the body to the callout service's /pick", order=4,
    template="dynmod_callout.yaml.j2", options=DynmodOptions, plan=plan, color="#ff7f0e",
    picker_call=Dynmod.CALLOUT, spans=((Service.ENVOY, Dynmod.CALLOUT), (Service.CALLOUT, Callout.PICK)), **TRAITS,
))
