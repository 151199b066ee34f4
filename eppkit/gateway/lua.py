"""Lua source for Envoy's Lua filter: a configuration as a Lua literal ahead of a filter's code.

The lua-callout mode inlines the kit's callout filter (plugins/lua/callout.lua) this way, and a
user's Lua filter with ``config`` (eppkit.gateway.user_filters) gets its configuration the same way.
"""

from __future__ import annotations

from typing import Any

from eppkit.core.paths import PLUGINS

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
