"""Copy every trace a Jaeger receives into Zipkin, each span exactly once, from a background thread.

Jaeger's query API has no "received since" cursor, only a search by service and span start
time. So every ``interval_s`` the feed

1. searches Jaeger (``/api/v3/traces``) for traces with a span in the last ``lookback_s``,
   and notes each trace's span ids;
2. reads each trace that holds a span id it has not posted yet through
   :class:`~eppkit.observability.jaeger_client.JaegerClient` (the kit's one trace reader),
   converts it (:mod:`eppkit.observability.zipkin_spans`), and posts only the new spans.

New spans are posted as soon as they appear, with no quiet period: a span reaches Jaeger only
once it has ended, so a stored span never changes, and a growing trace only gains new ids.
Posting each id once matters: Zipkin drops an identical re-post, but a different body under
the same id is stored as a second span.

Cost: each search downloads the whole traces of the window again. The feed therefore searches
the services every request passes through (``client``, ``envoy``) on each round and every
service only every ``full_every`` rounds (traces that never touch the edge, such as a request
sent straight to a mock vLLM, appear within that period), and it never polls more often than
twice the time a round took. ``lookback_s`` must exceed the longest request: a span is found
by its start time.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import threading
import time
from dataclasses import dataclass, field

import requests

from eppkit.observability import zipkin_spans
from eppkit.observability.jaeger_client import JaegerClient

log = logging.getLogger(__name__)

EDGE_SERVICES = ("client", "envoy")  # every request of a testbed passes one of these
SKIPPED_SERVICES = ("jaeger",)


@dataclass
class FeedStats:
    rounds: int = 0
    traces_posted: int = 0
    spans_posted: int = 0
    errors: int = 0
    last_error: str = ""
    last_round_s: float = 0.0


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _hex(value: str, nbytes: int) -> str:
    """Jaeger writes OTLP ids as hex; the OTLP/JSON spec says base64. Either way: lowercase hex."""
    if len(value) == 2 * nbytes and all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    return base64.b64decode(value).hex()


def span_ids(search_answer: dict) -> dict[str, set[str]]:
    """trace id -> its span ids, from a ``/api/v3/traces`` answer (OTLP JSON under ``result``)."""
    out: dict[str, set[str]] = {}
    for resource_spans in (search_answer.get("result") or {}).get("resourceSpans") or []:
        for scope_spans in resource_spans.get("scopeSpans") or []:
            for span in scope_spans.get("spans") or []:
                out.setdefault(_hex(span["traceId"], 16), set()).add(_hex(span["spanId"], 8))
    return out


@dataclass
class TraceFeed:
    jaeger_url: str  # Jaeger's query API, e.g. http://127.0.0.1:16686
    zipkin_url: str  # Zipkin's server, e.g. http://127.0.0.1:9411
    interval_s: float = 0.5
    lookback_s: float = 120.0
    max_traces: int = 1000  # per search; below Jaeger's memstore max_traces, above the traces in the window
    full_every: int = 10  # rounds between searches of every service
    timeout_s: float = 5.0
    stats: FeedStats = field(default_factory=FeedStats)
    _posted: dict[str, tuple[float, set[str]]] = field(default_factory=dict)  # trace id -> (last seen, span ids)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.jaeger_url = self.jaeger_url.rstrip("/")
        self.zipkin_url = self.zipkin_url.rstrip("/")
        self._http = requests.Session()
        self._jaeger = JaegerClient(self.jaeger_url, timeout_s=self.timeout_s)

    # -- Jaeger ----------------------------------------------------------------------------------
    def services(self) -> list[str]:
        resp = self._http.get(f"{self.jaeger_url}/api/v3/services", timeout=self.timeout_s)
        resp.raise_for_status()
        known = [s for s in json.loads(resp.text).get("services") or [] if s not in SKIPPED_SERVICES]
        edge = [s for s in known if s in EDGE_SERVICES]
        if edge and self.stats.rounds % self.full_every:
            return edge
        return known

    def search(self, service: str, now: float) -> dict[str, set[str]]:
        params = {"query.service_name": service,
                  "query.start_time_min": _rfc3339(now - self.lookback_s),
                  "query.start_time_max": _rfc3339(now + 60),
                  "query.num_traces": str(self.max_traces)}
        resp = self._http.get(f"{self.jaeger_url}/api/v3/traces", params=params, timeout=self.timeout_s)
        if resp.status_code == 404:  # Jaeger's answer when nothing matched
            return {}
        resp.raise_for_status()
        return span_ids(json.loads(resp.text))  # served as text/plain

    # -- Zipkin ----------------------------------------------------------------------------------
    def post(self, spans: list[dict]) -> None:
        resp = self._http.post(f"{self.zipkin_url}/api/v2/spans", data=json.dumps(spans),
                               headers={"Content-Type": "application/json"}, timeout=self.timeout_s)
        if resp.status_code != 202:
            raise RuntimeError(f"Zipkin refused {len(spans)} span(s): HTTP {resp.status_code} {resp.text[:300]}")

    # -- one round -------------------------------------------------------------------------------
    def poll_once(self) -> int:
        """One search-and-copy round; returns how many spans it posted."""
        now = time.time()
        found: dict[str, set[str]] = {}
        for service in self.services():
            for trace_id, ids in self.search(service, now).items():
                found.setdefault(trace_id, set()).update(ids)
        fresh: dict[str, list[dict]] = {}
        for trace_id, ids in found.items():
            _, posted = self._posted.setdefault(trace_id, (now, set()))
            self._posted[trace_id] = (now, posted)
            if ids <= posted:
                continue
            trace = self._jaeger.get_trace(trace_id)
            new = [s for s in zipkin_spans.spans(trace) if s["id"] not in posted] if trace else []
            if new:
                fresh[trace_id] = new
        spans = [s for new in fresh.values() for s in new]
        if spans:
            self.post(spans)  # marked as posted only once Zipkin took them
            for trace_id, new in fresh.items():
                self._posted[trace_id][1].update(s["id"] for s in new)
            self.stats.spans_posted += len(spans)
            self.stats.traces_posted += len(fresh)
        for trace_id in [t for t, (seen, _) in self._posted.items() if seen < now - self.lookback_s]:
            del self._posted[trace_id]  # out of the window: it cannot be found again
        self.stats.rounds += 1
        return len(spans)

    # -- the thread ------------------------------------------------------------------------------
    def start(self) -> "TraceFeed":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="eppkit-trace-feed", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.poll_once()
            except (requests.RequestException, RuntimeError, ValueError) as exc:
                # Jaeger or Zipkin busy, restarting or gone: the next round tries again.
                self.stats.errors += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.debug("trace feed round failed: %s", exc)
            self.stats.last_round_s = time.monotonic() - started
            self._stop.wait(max(self.interval_s, 2 * self.stats.last_round_s))

    def __enter__(self) -> "TraceFeed":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

