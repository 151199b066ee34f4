"""A user's own HTTP filters in the testbed's Envoy, around the mode's own filters.

Three kinds, each placed ``before`` (first in the chain, ahead of the kit's body router and
picker) or ``after`` (behind the picker, right before the router); several of each, in order:

- :class:`LuaFilter`: a Lua file or inline source. With ``config`` the source is inlined behind
  ``EPPKIT_CONFIG = <config as a Lua table>;`` on its first line (line numbers stay the user's);
  without, Envoy reads the file itself (``default_source_code.filename``).
- :class:`DynamicModule`: a built ``.so``, or a Go module directory (``go.mod``) that eppkit builds
  with :mod:`eppkit.builds.dynmod` (cached, locked); ``filter_name`` and ``config`` (a string as
  is, anything else as JSON text) go to Envoy's DynamicModuleFilter.
- :class:`HttpFilter`: any other HTTP filter as one ``http_filters`` entry (``name`` +
  ``typed_config``), YAML text, a YAML file or a dict.

:func:`prepare` runs before any component starts: it builds Go modules and has the testbed's
own Envoy binary validate each filter alone (``envoy --mode validate`` loads a dynamic module
and compiles Lua), so a module that does not load, a filter name the module lacks or a Lua
syntax error fails the testbed's start with the filter, the Envoy version and Envoy's own
words. The rendered entries go into ``envoy/base.yaml.j2``'s ``http_filters`` list.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Union

import yaml

from eppkit.builds import dynmod as dynmod_build
from eppkit.gateway import config as envoy_config
from eppkit.gateway import go_modules
from eppkit.gateway.lua import lua_literal
from eppkit.gateway.versions import EnvoyBinary, EnvoyFeatureMissing

POSITIONS = ("before", "after")
LUA_CONFIG_GLOBAL = "EPPKIT_CONFIG"
LUA_TYPE = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
DYNMOD_TYPE = "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter"
STRING_TYPE = "type.googleapis.com/google.protobuf.StringValue"


class UserFilterError(RuntimeError):
    """A user filter that cannot be used: missing file, failed build, or Envoy refused it."""


def _check_position(position: str) -> None:
    if position not in POSITIONS:
        raise ValueError(f"position {position!r}: choose before or after")


@dataclass
class LuaFilter:
    """A Lua HTTP filter: ``path`` (a file) or ``source`` (inline); ``config`` -> the global EPPKIT_CONFIG."""

    path: str | Path | None = None
    source: str | None = None
    config: Any = None
    position: str = "before"
    name: str | None = None  # the http_filters entry's name; default user.lua.<file stem>

    def __post_init__(self) -> None:
        if (self.path is None) == (self.source is None):
            raise ValueError("LuaFilter needs exactly one of path= or source=")
        _check_position(self.position)

    @property
    def label(self) -> str:
        return f"Lua filter {self.path}" if self.path is not None else f"Lua filter {self.name or 'user.lua'} (inline)"


@dataclass
class DynamicModule:
    """A dynamic module: a built ``.so`` or a Go module directory eppkit builds; one of its filters."""

    path: str | Path
    filter_name: str | None = None  # default: the module name
    config: Any = None  # filter_config: a str as is, anything else as JSON text; None: none
    position: str = "before"
    module_name: str | None = None  # default: the file's name without lib/.so, or the Go module path's last part

    def __post_init__(self) -> None:
        _check_position(self.position)

    @property
    def module(self) -> str:
        if self.module_name:
            return self.module_name
        path = Path(self.path)
        go_mod = path / "go.mod"
        if go_mod.is_file():  # "module example.com/tenantgate" -> tenantgate
            m = re.search(r"^module\s+(\S+)", go_mod.read_text(), re.M)
            if m:
                return m.group(1).strip('"').rstrip("/").split("/")[-1]
        stem = path.name
        stem = stem[:-3] if stem.endswith(".so") else stem
        return stem[3:] if stem.startswith("lib") and len(stem) > 3 else stem

    @property
    def filter(self) -> str:
        return self.filter_name or self.module

    @property
    def label(self) -> str:
        return f"dynamic module {self.module} ({self.path}, filter_name {self.filter})"


@dataclass
class HttpFilter:
    """Any other HTTP filter: one http_filters entry (``name``, ``typed_config``): YAML text, a YAML file (a Path) or a dict."""

    snippet: str | Path | dict
    position: str = "before"

    def __post_init__(self) -> None:
        _check_position(self.position)

    @property
    def label(self) -> str:
        if isinstance(self.snippet, Path):
            return f"HTTP filter snippet {self.snippet}"
        name = self.snippet.get("name") if isinstance(self.snippet, dict) else None
        return f"HTTP filter {name}" if name else "HTTP filter snippet (inline)"


UserFilter = Union[LuaFilter, DynamicModule, HttpFilter]


def is_dynamic_module(flt: UserFilter) -> bool:
    """A dynamic module: a :class:`DynamicModule`, or a snippet of a filter that loads one."""
    if isinstance(flt, HttpFilter):
        try:
            return bool(go_modules.modules(_snippet_entry(flt)))
        except UserFilterError:  # not one entry: said when the testbed starts
            return False
    return isinstance(flt, DynamicModule)


# -- specs on the command line: PATH[:FILTER_NAME][@before|@after] ------------------------------------

def split_position(spec: str) -> tuple[str, str]:
    """``"f.lua@after"`` -> ``("f.lua", "after")``; no suffix -> before."""
    head, sep, tail = spec.rpartition("@")
    if sep and tail in POSITIONS:
        return head, tail
    return spec, "before"


def parse_lua(spec: str) -> LuaFilter:
    path, position = split_position(spec)
    return LuaFilter(path=path, position=position)


def parse_module(spec: str) -> DynamicModule:
    rest, position = split_position(spec)
    path, sep, filter_name = rest.rpartition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", filter_name):
        path, filter_name = rest, ""
    return DynamicModule(path=path, filter_name=filter_name or None, position=position)


def parse_snippet(spec: str) -> HttpFilter:
    path, position = split_position(spec)
    return HttpFilter(snippet=Path(path), position=position)


# -- preparing: build, render, validate ----------------------------------------------------------------

@dataclass
class PreparedFilter:
    label: str
    position: str
    entry: dict  # one http_filters entry


def prepare(filters: list[UserFilter], envoy: EnvoyBinary, work_dir: Path,
            progress: Callable[[str], object] = print, env: dict[str, str] | None = None) -> list[PreparedFilter]:
    """Every filter rendered, built if needed and validated alone by ``envoy`` (with ``env``, what the testbed's
    Envoy gets in its environment); raises UserFilterError."""
    prepared: list[PreparedFilter] = []
    names: set[str] = set()
    for index, flt in enumerate(filters):
        entry = _entry(flt, progress)
        label = flt.label
        if isinstance(flt, HttpFilter) and not isinstance(flt.snippet, Path):
            label = f"HTTP filter {entry['name']}"  # known once the YAML is read
        entry["name"] = _unique(str(entry["name"]), names)
        if isinstance(flt, LuaFilter):
            # Its own stat_prefix: its ``errors`` counter (a script error, which Envoy lets the request through on)
            # is http.<connection manager>.lua.<prefix>.errors, apart from any other Lua filter's (lua-callout's).
            entry["typed_config"]["stat_prefix"] = lua_stat_prefix(entry["name"])
        prepared.append(PreparedFilter(label, flt.position, entry))
        check(prepared[-1], envoy, work_dir / f"user-filter-{index}.yaml", env)
    return prepared


def template_vars(prepared: list[PreparedFilter]) -> dict[str, list[str]]:
    """``user_filters_before`` / ``user_filters_after``: each entry as one line of JSON (valid YAML)."""
    def lines(position: str) -> list[str]:
        return [json.dumps(p.entry, ensure_ascii=False) for p in prepared if p.position == position]

    return {"user_filters_before": lines("before"), "user_filters_after": lines("after")}


def check(prepared: PreparedFilter, envoy: EnvoyBinary, config_path: Path, env: dict[str, str] | None = None) -> None:
    """Validate one filter alone with the real binary; a refusal names the filter, the version and Envoy's words
    (a Go module's panic in Go's: eppkit.gateway.config.envoy_messages)."""
    try:
        envoy_config.check_filters([prepared.entry], envoy, config_path, what=prepared.label, env=env)
    except EnvoyFeatureMissing as exc:
        raise UserFilterError(str(exc)) from None
    except envoy_config.EnvoyConfigInvalid as exc:
        hint = next((h for needle, h in HINTS if needle in exc.envoy_says), "")
        raise UserFilterError(
            f"{prepared.label} does not load in Envoy {envoy.version}. Envoy says:\n"
            + "\n".join(f"  {line}" for line in exc.envoy_says.splitlines())
            + (f"\nHint: {hint}" if hint else "")
        ) from None


# Envoy's words -> what to do about them.
HINTS = (
    ("failed to get plugin config factory",
     "the module has no filter by that filter_name (a Go module registers its names with "
     "sdk.RegisterHttpFilterConfigFactories); pass --dynamic-module PATH:FILTER_NAME"),
    ("ABI version mismatch",
     "the module was built with an SDK for another Envoy version; build it against this version's SDK "
     "or choose the Envoy version it was built for (--envoy-version)"),
    ("No such file or directory", "the module file is not there"),
    ("invalid ELF header", "the file is not a shared library built for this machine"),
    ("script load error", "a Lua syntax error: the line number is in the Lua source"),
    ("Failed to resolve symbol", "the file is a shared library, but not an Envoy dynamic module"),
    *((words, go_modules.CGO_HINT) for words in go_modules.CGO_CHECK_WORDS),
)


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}.{n}", n + 1
    taken.add(candidate)
    return candidate


def _existing(path: str | Path, what: str) -> Path:
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise UserFilterError(f"{what}: {path} does not exist")
    return resolved


def _entry(flt: UserFilter, progress: Callable[[str], object]) -> dict:
    if isinstance(flt, LuaFilter):
        return _lua_entry(flt)
    if isinstance(flt, DynamicModule):
        return _module_entry(flt, progress)
    if isinstance(flt, HttpFilter):
        return _snippet_entry(flt)
    raise TypeError(f"not a user filter: {flt!r} (use LuaFilter, DynamicModule or HttpFilter)")


def _lua_entry(flt: LuaFilter) -> dict:
    path = _existing(flt.path, flt.label) if flt.path is not None else None
    name = flt.name or (f"user.lua.{path.stem}" if path else "user.lua")
    if path is not None and flt.config is None:
        source: dict[str, str] = {"filename": str(path)}  # Envoy reads the file (a container gets it mounted)
    else:
        code = path.read_text() if path is not None else str(flt.source)
        if flt.config is not None:  # on the first line, so Envoy's line numbers are the user's
            code = f"{LUA_CONFIG_GLOBAL} = {lua_literal(flt.config)}; {code}"
        source = {"inline_string": code}
    return {"name": name, "typed_config": {"@type": LUA_TYPE, "default_source_code": source}}


def lua_stat_prefix(name: str) -> str:
    """A Lua filter entry's stat_prefix: its name with every character a stat name splits on made ``_``."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _module_entry(flt: DynamicModule, progress: Callable[[str], object]) -> dict:
    path = _existing(flt.path, flt.label)
    if path.is_dir():
        if not (path / "go.mod").is_file():
            raise UserFilterError(f"{flt.label}: a module directory must be a Go module (no go.mod in {path})")
        try:
            library = dynmod_build.build(progress, source_dir=path, lib_name=f"lib{flt.module}.so")
        except dynmod_build.DynmodBuildError as exc:
            raise UserFilterError(f"{flt.label} did not build:\n{exc}") from None
    else:
        library = path
    typed: dict[str, Any] = {
        "@type": DYNMOD_TYPE,
        # An absolute path: no ENVOY_DYNAMIC_MODULES_SEARCH_PATH. A Go runtime cannot be unloaded: never dlclose.
        "dynamic_module_config": {"module": {"local": {"filename": str(library)}}, "do_not_close": True},
        "filter_name": flt.filter,
    }
    if flt.config is not None:
        value = flt.config if isinstance(flt.config, str) else json.dumps(flt.config)
        typed["filter_config"] = {"@type": STRING_TYPE, "value": value}
    return {"name": f"user.dynamic_module.{flt.module}.{flt.filter}", "typed_config": typed}


def _snippet_entry(flt: HttpFilter) -> dict:
    snippet = flt.snippet
    if isinstance(snippet, Path):
        snippet = _existing(snippet, flt.label).read_text()
    if isinstance(snippet, str):
        try:
            snippet = yaml.safe_load(snippet)
        except yaml.YAMLError as exc:
            raise UserFilterError(f"{flt.label} is not YAML: {exc}") from None
    if isinstance(snippet, list) and len(snippet) == 1:  # written as one item of an http_filters list
        snippet = snippet[0]
    if not isinstance(snippet, dict) or "name" not in snippet or "typed_config" not in snippet:
        raise UserFilterError(f"{flt.label} must be one http_filters entry: a mapping with name and typed_config")
    return json.loads(json.dumps(snippet))  # a copy, plain JSON types only
