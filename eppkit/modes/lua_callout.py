"""lua-callout: a Lua filter asks the callout routing service for the endpoint (httpCall).

Options: :class:`eppkit.modes._callout.CalloutOptions` (the picker core's settings,
``failure_mode_allow``: callout unreachable routes round-robin instead of a 502,
``callout_timeout_ms``, ``pick_latency_ms``, ``pick_latency_jitter_ms``, ``body_routing``).

In pd / epd / ttft the callout also gets the flow's prefillers and encoders and answers them in
x-prefiller-host-port / x-encoder-hosts-ports, which the filter copies onto the request for the
pd-sidecar.
"""

from __future__ import annotations

from eppkit.gateway.body_routing import body_routing_vars
from eppkit.gateway.lua import lua_source
from eppkit.modes._callout import TRAITS, CalloutOptions, callout_names, callout_service
from eppkit.modes._pickers import picked_vars
from eppkit.modes.registry import Mode, register
from eppkit.observability.contract import Callout, Cluster, Envoy, Service
from eppkit.plan import ModePlan


def plan(topology, options: CalloutOptions, ports, backends, pools=None, kube=None) -> ModePlan:
    callout = callout_service(options, ports.port(), backends, pools)
    config = {"cluster": Cluster.CALLOUT, "timeout_ms": options.callout_timeout_ms,
              "failure_mode_allow": options.failure_mode_allow, **callout_names()}
    return ModePlan(
        services=[callout],
        envoy_vars={
            "callout_port": callout.port,
            "lua_callout_source": lua_source("callout.lua", "EPPKIT_CALLOUT", config),
            **body_routing_vars(options.body_routing, backends),
            **picked_vars(options.max_fallbacks),
        },
    )


MODE = register(Mode(
    name="lua-callout", summary="a Lua filter POSTs the body to the callout service's /pick (httpCall)", order=3,
    template="lua_callout.yaml.j2", options=CalloutOptions, plan=plan, color="#2ca02c",
    picker_call=Envoy.CALLOUT_CALL,
    spans=((Service.ENVOY, Envoy.CALLOUT_CALL), (Service.CALLOUT, Callout.PICK)), **TRAITS,
))
