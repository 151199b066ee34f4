"""lua-callout: a Lua filter asks the callout routing service for the endpoint (httpCall).

Topology options read here (all optional):
  failure_mode_allow  bool   callout unreachable: route round-robin (True) or answer 502 (False, default)
  body_routing        bool   put the body-based model router in front; one pool per backend model
  scorer              str    the callout's scorer: round-robin (default) | prefix-cache
  callout_timeout_ms  int    httpCall timeout (default 1000)
  pick_latency_ms     float  time each pick takes on purpose (default 0)

Body routing itself is mode-independent: testbed/body_routing.py.

In pd / epd / ttft the callout also gets the flow's prefillers and encoders (``pools``) and
answers them in x-prefiller-host-port / x-encoder-hosts-ports, which the filter copies onto
the request for the pd-sidecar.
"""

from __future__ import annotations

from eppkit.body_routing import body_routing_vars, lua_source
from eppkit.modes import callout_service
from eppkit.topology import Endpoint, ModePlan, PortAllocator, Topology


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint], pools=None) -> ModePlan:
    options = topology.options
    routing = body_routing_vars(topology, backends)
    callout = callout_service(topology, ports, backends, pools, body_routing=routing["body_routing"])
    callout_config = {
        "cluster": "callout",
        "timeout_ms": int(options.get("callout_timeout_ms", 1000)),
        "failure_mode_allow": bool(options.get("failure_mode_allow", False)),
    }
    return ModePlan(
        services=[callout],
        envoy_vars={
            "callout_port": callout.port,
            "lua_callout_source": lua_source("callout.lua", "EPPKIT_CALLOUT", callout_config),
            **routing,
        },
    )
