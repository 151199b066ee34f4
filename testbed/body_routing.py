"""Body-based routing, usable in front of any mode: the model name from the JSON body picks the pool.

The Lua router (plugins/lua/body_router.lua) copies the top-level ``"model"`` into
``x-gateway-model-name``; envoy/_body_router.j2 adds one route and one cluster per model.
Mode plug-ins merge :func:`body_routing_vars` into their envoy_vars. Also here: how the
kit inlines Lua sources (with their configuration) into a rendered Envoy config.
"""

from __future__ import annotations

import re
from typing import Any

from eppkit.paths import PLUGINS
from eppkit.topology import Endpoint

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


def body_routing_vars(enabled: bool, backends: list[Endpoint]) -> dict[str, Any]:
    """Template variables for envoy/_body_router.j2: body_routing, body_router_source, pools."""
    pools = pools_for(backends, by_model=enabled)
    source = ""
    if enabled:
        source = lua_source("body_router.lua", "EPPKIT_BODY_ROUTER", {"models": [p["model"] for p in pools]})
    return {"body_routing": enabled, "body_router_source": source, "pools": pools}
