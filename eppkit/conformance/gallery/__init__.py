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
    "refuses_in_plain_text": "an auth gate that refuses a request without x-tenant with a plain-text 403 (judge it "
                             "with --plugin-let-through 'x-tenant: acme')",
    "errors_on_odd_json": "reads the model from a body it takes for a JSON object: a script error on a body that is "
                          "not one",
    "burns_cpu": "builds strings for 2 ms of CPU on every request: each request that much later",
    "leaks_per_request": "keeps 32 KiB of every request in a global table: Envoy's memory grows without a bound",
}


def path(name: str) -> Path:
    """The gallery filter's file; ValueError naming the known ones."""
    if name not in GALLERY:
        raise ValueError(f"no gallery filter {name!r}; choose one of {', '.join(GALLERY)}")
    return HERE / f"{name}.lua"


def main(argv: list[str]) -> None:
    """``python -m eppkit.conformance.gallery NAME``: its path (no NAME: every one, with what it does)."""
    if argv:
        print(path(argv[0]))
    else:
        print("\n".join(f"{name:<24} {path(name)}  ({what})" for name, what in GALLERY.items()))
