"""Read traces back from Jaeger's stable query API (``/api/v3``, OTLP JSON), waiting until they are complete.

Jaeger v2 answers ``GET /api/v3/traces/{id}`` with ``text/plain`` whose body is
``{"result": {"resourceSpans": [...]}}`` (OTLP JSON: hex ids, times and int64 as strings, each
span in its own ``resourceSpans`` entry, in no particular order), and a trace it does not hold
with 404 ``{"error": {"httpCode": 404, "message": "No traces found"}}``.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping

import requests
from eppkit.observability.expected_spans import SpanRule, missing, rules
from eppkit.observability.trace_model import Span, Trace, from_otlp

from eppkit.core.polling import PollTimeout, poll


class TraceIncomplete(AssertionError):
    pass


class JaegerClient:
    def __init__(self, api_url: str, timeout_s: float = 5.0):
        self.api_url = api_url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = requests.Session()

    def get_trace_json(self, trace_id: str) -> dict | None:
        """One trace as OTLP JSON (``{"resourceSpans": [...]}``), or None while Jaeger holds none of it.

        That is also the file format of saved traces: Jaeger UI's "JSON File" upload reads it.
        """
        # raw_traces: the spans as they were sent, without Jaeger's adjusters (clock-skew shifts, warnings)
        resp = self._session.get(self.trace_url(trace_id), params={"raw_traces": "true"}, timeout=self.timeout_s)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        result = json.loads(resp.text).get("result") or {}  # text/plain, not application/json
        return result if result.get("resourceSpans") else None

    def get_trace(self, trace_id: str) -> Trace | None:
        raw = self.get_trace_json(trace_id)
        return from_otlp(raw) if raw else None

    def spans_between(self, service: str, start_us: int, end_us: int, *, operation: str = "",
                      limit: int = 100) -> list[Span]:
        """Every span of the traces of ``service`` that started in ``[start_us, end_us]`` (any trace).

        For a component that starts a trace of its own per request (the GAIE EPP v1.5.0): its spans
        are found by the time of the request, not by the request's trace id.
        """
        def rfc3339(us: int) -> str:
            return datetime.fromtimestamp(us / 1e6, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

        params = {"query.service_name": service, "query.start_time_min": rfc3339(start_us),
                  "query.start_time_max": rfc3339(end_us), "query.num_traces": str(limit), "raw_traces": "true"}
        if operation:
            params["query.operation_name"] = operation
        resp = self._session.get(f"{self.api_url}/api/v3/traces", params=params, timeout=self.timeout_s)
        if resp.status_code == 404:
            return []
        resp.raise_for_status()
        result = json.loads(resp.text).get("result") or {}
        return from_otlp(result).spans if result.get("resourceSpans") else []

    def services(self) -> list[str]:
        resp = self._session.get(f"{self.api_url}/api/v3/services", timeout=self.timeout_s)
        resp.raise_for_status()
        return json.loads(resp.text).get("services") or []

    def trace_url(self, trace_id: str) -> str:
        return f"{self.api_url}/api/v3/traces/{trace_id}"

    def wait_for_trace(
        self,
        trace_id: str,
        expected: Iterable[SpanRule | tuple[str, str] | str] = (),
        *,
        min_spans: int = 0,
        quiet_s: float = 0.3,
        timeout_s: float = 15.0,
        poll_s: float = 0.1,
        on_poll: Callable[[Trace | None], None] | None = None,
    ) -> Trace:
        """Poll until the trace holds every expected span (and ``min_spans``) and has been quiet.

        ``expected``: span rules, ``(service, name)`` pairs or span names of the trace contract.
        ``quiet_s``: additionally wait until no new span has arrived for this long, so late spans
        (Envoy flushes in batches) are not missed. Raises :class:`TraceIncomplete` at the
        deadline, naming what is still missing.
        """
        wanted = rules(expected)
        state = {"count": -1, "since": time.monotonic(), "missing": ["any span"]}

        def fetch() -> Trace | None:
            try:
                trace = self.get_trace(trace_id)
            except requests.RequestException:
                trace = None  # Jaeger busy or restarting: the deadline decides
            if on_poll:
                on_poll(trace)
            return trace

        def complete(trace: Trace | None) -> bool:
            count = len(trace.spans) if trace else 0
            if count != state["count"]:
                state["count"], state["since"] = count, time.monotonic()
            state["missing"] = missing(trace, wanted, min_spans=min_spans)
            return not state["missing"] and time.monotonic() - state["since"] >= quiet_s

        def incomplete(trace: Trace | None, _error) -> str:
            have = ", ".join(sorted({s.label for s in trace.spans})) if trace else "nothing"
            return (f"trace {trace_id} incomplete after {timeout_s:.0f}s: missing "
                    f"{', '.join(state['missing']) or 'quiet period'}; Jaeger has: {have}.\nHint: check that the "
                    f"service exports to Jaeger's OTLP port and that Envoy's tracing flush interval is short.")

        try:
            return poll(fetch, complete, timeout_s=timeout_s, interval_s=poll_s, describe=incomplete)
        except PollTimeout as exc:
            raise TraceIncomplete(str(exc)) from None

    def wait_for_traces(
        self,
        expected: Mapping[str, Iterable[SpanRule | tuple[str, str] | str]],
        *,
        timeout_s: float = 20.0,
        settle_s: float = 0.5,
        poll_s: float = 0.3,
        on_poll: Callable[[int, int], None] | None = None,
    ) -> dict[str, tuple[dict | None, list[str]]]:
        """Many traces at once: trace id -> its expected spans; returns trace id -> (OTLP JSON, missing).

        Fetches every pending trace each round until all are complete or ``timeout_s`` passes;
        ``missing`` is [] for a complete trace. ``on_poll(complete, total)`` after each round.
        """
        wanted = {trace_id: rules(spans) for trace_id, spans in expected.items()}
        out: dict[str, tuple[dict | None, list[str]]] = {
            trace_id: (None, ["the whole trace (Jaeger has no span of it)"]) for trace_id in wanted}
        pending = set(wanted)
        time.sleep(settle_s)  # the last requests' spans are still on their way

        def round_() -> set[str]:
            for trace_id in sorted(pending):
                try:
                    raw = self.get_trace_json(trace_id)
                except requests.RequestException:
                    continue
                if raw is None:
                    continue
                lacking = missing(from_otlp(raw), wanted[trace_id])
                out[trace_id] = (raw, lacking)
                if not lacking:
                    pending.discard(trace_id)
            if on_poll:
                on_poll(len(wanted) - len(pending), len(wanted))
            return pending

        try:
            poll(round_, lambda left: not left, timeout_s=timeout_s, interval_s=poll_s, describe="complete traces")
        except PollTimeout:
            pass  # what is still missing is in the answer
        return out
