"""lua-callout: a Lua filter asks the callout routing service for the endpoint (httpCall).

Topology options read here (all optional):
  failure_mode_allow  bool   callout unreachable: route round-robin (True) or answer 502 (False, default)
  body_routing        bool   put the body-based model router in front; one pool per backend model
  scorer              str    the callout's scorer: round-robin (default) | prefix-cache
  callout_timeout_ms  int    httpCall timeout (default 1000)
  pick_latency_ms     float  time each pick takes on purpose (default 0)

``body_routing_vars`` is the mode-independent part of body routing (pools per model and the
router's Lua source); any mode's plug-in can merge it into its envoy_vars and use
envoy/_body_router.j2.
"""

from __future__ import annotations

import re
from typing import Any

from testbed.paths import PLUGINS
from testbed.topology import Endpoint, ModePlan, PortAllocator, ServiceSpec, Topology

LUA_DIR = PLUGINS / "lua"


def lua_literal(value: Any) -> str:
    """``value`` (None, bool, number, str, list, dict) as a Lua expression."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # Decimal escapes for everything but plain printable ASCII: valid in Lua 5.1 / LuaJIT.
        return '"' + "".join(
            chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:03d}" for b in value.encode()
        ) + '"'
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{lua_literal(k)}] = {lua_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def lua_source(filename: str, config_global: str, config: dict[str, Any]) -> str:
    """plugins/lua/<filename> preceded by ``<config_global> = {...}``, ready to inline into Envoy."""
    return f"{config_global} = {lua_literal(config)}\n" + (LUA_DIR / filename).read_text()


def pools_for(backends: list[Endpoint], *, by_model: bool) -> list[dict[str, Any]]:
    """One pool of every backend (cluster ``pool``), or one pool per model in first-seen order."""
    if not backends:
        raise ValueError("a pool needs at least one backend")
    if not by_model:
        return [{"model": None, "cluster": "pool", "endpoints": list(backends)}]
    pools: dict[str, dict[str, Any]] = {}
    for ep in backends:
        if ep.model not in pools:
            cluster = "pool_" + re.sub(r"[^A-Za-z0-9_.-]", "_", ep.model)
            if any(p["cluster"] == cluster for p in pools.values()):
                cluster += f"_{len(pools)}"
            pools[ep.model] = {"model": ep.model, "cluster": cluster, "endpoints": []}
        pools[ep.model]["endpoints"].append(ep)
    return list(pools.values())


def body_routing_vars(topology: Topology, backends: list[Endpoint]) -> dict[str, Any]:
    """Template variables for envoy/_body_router.j2: body_routing, body_router_source, pools."""
    enabled = bool(topology.options.get("body_routing"))
    pools = pools_for(backends, by_model=enabled)
    source = ""
    if enabled:
        source = lua_source("body_router.lua", "EPPKIT_BODY_ROUTER", {"models": [p["model"] for p in pools]})
    return {"body_routing": enabled, "body_router_source": source, "pools": pools}


def plan(topology: Topology, ports: PortAllocator, backends: list[Endpoint]) -> ModePlan:
    options = topology.options
    routing = body_routing_vars(topology, backends)
    # With body routing the callout learns each endpoint's model and picks within the
    # model named by x-gateway-model-name; without it every endpoint serves every request.
    suffix = (lambda ep: f"@{ep.model}") if routing["body_routing"] else (lambda ep: "")
    endpoints = ",".join(f"{ep.address}={ep.name}{suffix(ep)}" for ep in backends)
    port = ports.port()
    args = ["--endpoints", endpoints, "--scorer", str(options.get("scorer", "round-robin"))]
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
