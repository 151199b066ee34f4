"""The plugin gallery: the simplest Lua filter that breaks each plugin check's rule, and one that breaks none.
Each is proven in tests/e2e/test_plugin_gallery.py to fail exactly its own check, on HTTP/1.1 and h2c, in Envoy's
words; judge one yourself with ``eppkit conformance --plugin --lua-filter $(python -m eppkit.conformance.gallery
reads_whole_response)``."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
# name -> what it does wrong (its file says how, in a few lines)
GALLERY = {
    "noop": "nothing: it conforms",
    "reads_whole_response": "calls handle:body() on the response: a stream arrives all at once",
    "corrupts_body": "writes the request body back with its 16,385th byte changed",
    "errors_without_header": "indexes a nil header value when x-tenant is missing: a script error, and Envoy lets "
                             "the request through",
    "burns_cpu": "builds strings for 2 ms of CPU on every request: each request that much later",
    "leaks_per_request": "keeps 32 KiB of every request in a global table: Envoy's memory grows without a bound",
}


def path(name: str) -> Path:
    """The gallery filter's file; ValueError naming the known ones."""
    if name not in GALLERY:
        raise ValueError(f"no gallery filter {name!r}; choose one of {', '.join(GALLERY)}")
    return HERE / f"{name}.lua"

