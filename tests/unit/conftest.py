"""Every span a unit test records in memory must follow the trace contract (observability/contract.py).

The services' unit tests record their spans with OpenTelemetry's InMemorySpanExporter; this
fixture sees every span exported that way and fails the test (at teardown) when a span, one of
its attributes or events is not declared for it. So the contract is checked against what the
code really emits, path by path, by the tests that already drive those paths.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from eppkit.observability import contract


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
        problems += contract.violations(span.name, span.attributes or {},
                                        {e.name: (e.attributes or {}) for e in span.events},
                                        service=service if service in services else None)
    assert not problems, "spans that break the trace contract (observability/contract.py):\n" + "\n".join(
        sorted(set(problems)))
