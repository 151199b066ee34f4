"""Read traces back from Jaeger's query API, waiting until they are complete."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import requests

from eppkit.observability.trace_model import Trace, from_jaeger_json


class TraceIncomplete(AssertionError):
    pass


@dataclass
class Completeness:
    """When is a trace complete? Every expected (service, name) present and/or a span count reached.

    ``quiet_s``: additionally wait until no new span has arrived for this long, so late
    spans (Envoy flushes in batches) are not missed.
    """

    expected: tuple[tuple[str, str], ...] = ()
    min_spans: int = 0
    quiet_s: float = 0.3

    def missing(self, trace: Trace | None) -> list[str]:
        # expected_spans.SpanRule items (counts, name prefixes) or plain (service, name) pairs
        from eppkit.observability.expected_spans import SpanRule, missing

        rules = [r if isinstance(r, SpanRule) else SpanRule(*r) for r in self.expected]
        if trace is None:
            return [r.label for r in rules] or ["any span"]
        out = missing(trace, rules)
        if len(trace.spans) < self.min_spans:
            out.append(f"{self.min_spans - len(trace.spans)} more span(s) (have {len(trace.spans)})")
        return out


class JaegerClient:
    def __init__(self, api_url: str, timeout_s: float = 5.0):
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()

    def get_trace_json(self, trace_id: str) -> dict | None:
        """The raw Jaeger JSON of one trace (one element of /api/traces/{id} ``data``)."""
        resp = self._session.get(f"{self.api_url}/api/traces/{trace_id}", timeout=self.timeout_s)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        data = resp.json().get("data") or []
        return data[0] if data else None

    def get_trace(self, trace_id: str) -> Trace | None:
        raw = self.get_trace_json(trace_id)
        return from_jaeger_json(raw) if raw else None

    def services(self) -> list[str]:
        resp = self._session.get(f"{self.api_url}/api/services", timeout=self.timeout_s)
        resp.raise_for_status()
        return resp.json().get("data") or []

    def trace_url(self, trace_id: str) -> str:
        return f"{self.api_url}/api/traces/{trace_id}"

    def wait_for_trace(
        self,
        trace_id: str,
        expected: Iterable[tuple[str, str]] = (),
        *,
        min_spans: int = 0,
        quiet_s: float = 0.3,
        timeout_s: float = 15.0,
        poll_s: float = 0.1,
        on_poll: Callable[[Trace | None], None] | None = None,
    ) -> Trace:
        """Poll until the trace holds every expected span (and ``min_spans``) and has been quiet.

        Raises :class:`TraceIncomplete` at the deadline, naming what is still missing.
        """
        rule = Completeness(tuple(expected), min_spans, quiet_s)
        deadline = time.monotonic() + timeout_s
        last_count, last_change = -1, time.monotonic()
        trace: Trace | None = None
        while True:
            try:
                trace = self.get_trace(trace_id)
            except requests.RequestException as exc:
                if time.monotonic() > deadline:
                    raise TraceIncomplete(f"Jaeger at {self.api_url} did not answer: {exc}") from exc
                trace = None
            if on_poll:
                on_poll(trace)
            count = len(trace.spans) if trace else 0
            now = time.monotonic()
            if count != last_count:
                last_count, last_change = count, now
            missing = rule.missing(trace)
            if not missing and now - last_change >= quiet_s:
                return trace  # type: ignore[return-value]
            if now > deadline:
                have = ", ".join(sorted({s.label for s in trace.spans})) if trace else "nothing"
                raise TraceIncomplete(
                    f"trace {trace_id} incomplete after {timeout_s:.0f}s: missing {', '.join(missing) or 'quiet period'}; "
                    f"Jaeger has: {have}.\nHint: check that the service exports to Jaeger's OTLP port "
                    f"and that Envoy's tracing flush interval is short."
                )
            time.sleep(poll_s)
