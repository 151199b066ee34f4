"""Two rules for every unit test: it starts no process, and the spans it records follow the trace contract.

A unit test that starts a process (subprocess, a server binary, ldd ...) belongs in tests/integration:
``subprocess.Popen`` refuses here, saying so.

The services' unit tests record their spans with OpenTelemetry's InMemorySpanExporter; this
fixture sees every span exported that way and fails the test (at teardown) when a span, one of
its attributes or events is not declared for it. So the contract is checked against what the
code really emits, path by path, by the tests that already drive those paths.
"""

from __future__ import annotations

import platform
import subprocess

import matplotlib.font_manager
import pytest
from eppkit.observability import contract, contract_check
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@pytest.fixture(autouse=True)
def recorded_spans_follow_the_trace_contract(monkeypatch):
    seen = []
    export = InMemorySpanExporter.export

    def recording_export(self, spans):
        seen.extend(spans)
        return export(self, spans)

    monkeypatch.setattr(InMemorySpanExporter, "export", recording_export)
    yield seen
    services = contract.entries(contract.SERVICE)
    problems = []
    for span in seen:
        service = span.resource.attributes.get(contract.ResourceAttributes.SERVICE_NAME)
        problems += contract_check.violations(span.name, span.attributes or {},
                                        {e.name: (e.attributes or {}) for e in span.events},
                                        service=service if service in services else None)
    assert not problems, "spans that break the trace contract (observability/contract.py):\n" + "\n".join(
        sorted(set(problems)))


# Things that start a process once and cache what it said, done here, before the guard below: platform runs
# `uname -p` (compare's host info asks), matplotlib's font list runs `fc-list` on a machine without its cache.
platform.processor()
matplotlib.font_manager.fontManager.get_default_weight()


class _NoProcess:
    def __init__(self, args, *_, **__):
        raise AssertionError(f"tests/unit starts no process (this one ran {args!r}); move the test to tests/integration")


@pytest.fixture(autouse=True)
def unit_tests_start_no_process(monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", _NoProcess)
