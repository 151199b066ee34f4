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

from testbed.body_routing import LUA_DIR, body_routing_vars, lua_literal, lua_source, pools_for  # noqa: F401
from testbed.modes import callout_stage_args
from testbed.topology import Endpoint, ModePlan, PortAllocator, ServiceSpec, Topology

def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint], pools=None) -> ModePlan:
    options = topology.options
    routing = body_routing_vars(topology, backends)
    # With body routing the callout learns each endpoint's model and picks within the
    # model named by x-gateway-model-name; without it every endpoint serves every request.
    suffix = (lambda ep: f"@{ep.model}") if routing["body_routing"] else (lambda ep: "")
    endpoints = ",".join(f"{ep.address}={ep.name}{suffix(ep)}" for ep in backends)
    port = ports.port()
    args = ["--endpoints", endpoints, "--scorer", str(options.get("scorer", "round-robin")), *callout_stage_args(pools)]
    if options.get("pick_latency_ms"):
        args += ["--pick-latency", str(options["pick_latency_ms"])]
    callout_config = {
        "cluster": "callout",
        "timeout_ms": int(options.get("callout_timeout_ms", 1000)),
        "failure_mode_allow": bool(options.get("failure_mode_allow", False)),
    }
    return ModePlan(
        services=[ServiceSpec(name="callout", module="services.callout", port=port, args=args)],
        envoy_vars={
            "callout_port": port,
            "lua_callout_source": lua_source("callout.lua", "EPPKIT_CALLOUT", callout_config),
            **routing,
        },
    )
