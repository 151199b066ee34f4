"""dynmod-callout: a Go dynamic module asks the callout routing service for the endpoint.

The module (plugins/dynamic_module, filter ``eppkit_callout``) does what the Lua filter of
lua-callout does, with Envoy's async HTTP client from Go: buffer the body, POST it to the
callout's /pick, set x-gateway-destination-endpoint (ORIGINAL_DST), or pass the callout's
400/429/503 to the client, or fail closed (502) / open (pool). See docs/modes-dynmod.md.

The module is built on first use (``testbed.dynmod_build``: about 30-60 s cold, then cached;
``eppkit bootstrap`` builds it ahead). Envoy loads it by absolute path, so it needs no
environment variable.

Topology options read here (all optional), the same as lua-callout's:
  failure_mode_allow  bool   callout unreachable: route round-robin (True) or answer 502 (False, default)
  body_routing        bool   put the body-based model router in front; one pool per backend model
  scorer              str    the callout's scorer: round-robin (default) | prefix-cache
  callout_timeout_ms  int    callout timeout (default 1000)
  pick_latency_ms     float  time each pick takes on purpose (default 0)
  restrict_to_pool    bool   the module refuses picks outside the backends (default False)

In pd / epd / ttft the callout also gets the flow's prefillers and encoders (``pools``) and
answers them in x-prefiller-host-port / x-encoder-hosts-ports, which the filter copies onto
the request for the pd-sidecar.
"""

from __future__ import annotations

import sys
from typing import Any

from eppkit import dynmod_build
from eppkit.body_routing import body_routing_vars
from eppkit.modes import callout_service
from eppkit.topology import Endpoint, ModePlan, PortAllocator, Topology


def filter_config(topology: Topology, backends: list[Endpoint]) -> dict[str, Any]:
    """The eppkit_callout filter's JSON config (plugins/dynamic_module/internal/callout/config.go)."""
    options = topology.options
    config: dict[str, Any] = {
        "cluster": "callout",
        "authority": "callout",
        "path": "/pick",
        "timeout_ms": int(options.get("callout_timeout_ms", 1000)),
        "failure_mode_allow": bool(options.get("failure_mode_allow", False)),
        "destination_header": "x-gateway-destination-endpoint",
    }
    if options.get("restrict_to_pool"):
        config["allowed_endpoints"] = [ep.address for ep in backends]
    return config


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint], pools=None) -> ModePlan:
    routing = body_routing_vars(topology, backends)
    callout = callout_service(topology, ports, backends, pools, body_routing=routing["body_routing"])
    lib = dynmod_build.build(progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    return ModePlan(
        services=[callout],
        envoy_vars={
            "callout_port": callout.port,
            "dynmod_path": str(lib),
            "dynmod_callout_config": filter_config(topology, backends),
            **routing,
        },
    )
