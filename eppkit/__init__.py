"""eppkit: a real Envoy, Endpoint Picker integrations and traced mocks, checked on Jaeger traces.

The public API (what docs/api.md documents and the examples use):

    from eppkit import Topology, create, TraceCheck

    with create(Topology(mode="ext_proc")) as bed:
        result = bed.client().chat({"model": "mock-llm", "messages": [...]})
        path = TraceCheck(bed.wait_for_trace(result)).request_path("ext_proc")  # decision before upstream

In pytest, the plugin (``eppkit.pytest_plugin``, registered as ``pytest11``) gives fixtures for
all of this. Names are loaded on first use, so ``python -m eppkit.services.vllm`` (and the
services image, which holds only ``eppkit.services``, ``eppkit.observability`` and ``eppkit.core``) import nothing
of the testbed.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module that defines it
_EXPORTS = {
    "Topology": "eppkit.topology",
    "VllmSpec": "eppkit.topology",
    "Endpoint": "eppkit.plan",
    "ServiceSpec": "eppkit.plan",
    "ModePlan": "eppkit.plan",
    "MockLatency": "eppkit.services.vllm.config",
    "RUNTIMES": "eppkit.runtimes",
    "create": "eppkit.runtimes",
    "create_jaeger": "eppkit.runtimes",
    "LuaFilter": "eppkit.gateway.user_filters",
    "DynamicModule": "eppkit.gateway.user_filters",
    "HttpFilter": "eppkit.gateway.user_filters",
    "UserFilterError": "eppkit.gateway.user_filters",
    "TraceCheck": "eppkit.checks",
    "TraceAssertionError": "eppkit.observability.assertions",
    "Trace": "eppkit.observability.trace_model",
    "Span": "eppkit.observability.trace_model",
    "SpanNotFound": "eppkit.observability.trace_model",
    "TracedClient": "eppkit.observability.client",
    "ClientResult": "eppkit.observability.client",
    "JaegerClient": "eppkit.observability.jaeger_client",
    "TraceIncomplete": "eppkit.observability.jaeger_client",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'eppkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
