"""The plugin gallery: the simplest filter that breaks each plugin check's rule, and one that breaks none; Lua
filters (one file each) and the filters of one Go dynamic module (``go/``, built on first use like any Go module
directory you give ``--dynamic-module``). Each is proven in tests/e2e/test_plugin_gallery.py to fail exactly its own
checks, in Envoy's words; judge one yourself with ``eppkit conformance --plugin $(python -m
eppkit.conformance.gallery --flag reads_whole_response)``."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
GO_MODULE = HERE / "go"  # one Go module, a filter per gallery entry (its main.go says how each breaks its rule)
# name -> what it does wrong (its file says how, in a few lines)
LUA = {
    "noop": "nothing: it conforms",
    "reads_whole_response": "calls handle:body() on the response: a stream arrives all at once",
    "corrupts_body": "writes the request body back with its 16,385th byte changed",
    "errors_without_header": "indexes a nil header value when x-tenant is missing: a script error, and Envoy lets "
                             "the request through",
    "refuses_in_plain_text": "an auth gate that refuses a request without x-tenant with a plain-text 403 (judge it "
                             "with --plugin-let-through 'x-tenant: acme')",
    "errors_on_odd_json": "reads the model from a body it takes for a JSON object: a script error on a body that is "
                          "not one",
    "burns_cpu": "builds strings for 2 ms of CPU on every request: each request that much later",
    "leaks_per_request": "keeps 32 KiB of every request in a global table: Envoy's memory grows without a bound",
}
GO = {
    "holds_trailers": "a Go module that never continues a request that has trailers: it waits until the client "
                      "gives up",
    "leaks_go_heap": "a Go module that keeps 32 KiB of every request in a Go slice: Envoy's memory grows without a "
                     "bound, outside the heap Envoy's own stats see",
    "panics_on_cancel": "a Go module that reads, when a stream completes, a pointer set when its answer ends: a "
                        "stream the client cancels has none, and a panic in a dynamic module ends Envoy",
    "logs_error_without_header": "a Go module that logs an error through Envoy for a request without x-tenant and "
                                 "lets it through (judge it with --plugin-let-through 'x-tenant: acme')",
}
GALLERY = {**LUA, **GO}


def _known(name: str) -> None:
    if name not in GALLERY:
        raise ValueError(f"no gallery filter {name!r}; choose one of {', '.join(GALLERY)}")


def path(name: str) -> str:
    """What names the gallery filter on the command line: a Lua filter's file, or ``DIR:NAME`` of the Go module's
    filter (``--dynamic-module``'s form); ValueError naming the known ones."""
    _known(name)
    return str(GO_MODULE) + f":{name}" if name in GO else str(HERE / f"{name}.lua")


def flag(name: str) -> str:
    """The command-line flags that put the gallery filter into a verdict."""
    return f"{'--dynamic-module' if name in GO else '--lua-filter'} {path(name)}"


def plugin(name: str):
    """The gallery filter as a user filter (a LuaFilter, or the Go module's DynamicModule)."""
    from eppkit.gateway.user_filters import DynamicModule, LuaFilter

    _known(name)
    return DynamicModule(path=GO_MODULE, filter_name=name) if name in GO else LuaFilter(path=path(name))


def main(argv: list[str]) -> None:
    """``python -m eppkit.conformance.gallery [--flag] NAME``: its path (with ``--flag``, the flags that judge it);
    no NAME: every one, with what it does."""
    as_flag = bool(argv) and argv[0] == "--flag"
    names = argv[1:] if as_flag else argv
    if names:
        print(flag(names[0]) if as_flag else path(names[0]))
    else:
        print("\n".join(f"{name:<24} {flag(name)}  ({what})" for name, what in GALLERY.items()))
