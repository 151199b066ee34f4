"""The feed from Jaeger to Zipkin posts every span exactly once, and only once Zipkin has taken it.

Jaeger and Zipkin are stand-ins here (their HTTP answers as measured on Jaeger v2.13 and Zipkin
3.6.1); the real pair is driven by tests/e2e/test_cli.py (``eppkit up --ui``).
"""

import base64
import json
from pathlib import Path

import pytest

from eppkit.compare import report as rp
from eppkit.ui import feed as trace_feed

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "traces"


def v3_answer(traces, base64_ids=False):
    """Jaeger's /api/v3/traces answer: one resourceSpans entry per span, hex ids (base64 per the OTLP spec)."""
    def enc(h):
        return base64.b64encode(bytes.fromhex(h)).decode() if base64_ids else h

    return {"result": {"resourceSpans": [
        {"resource": {}, "scopeSpans": [{"scope": {}, "spans": [{"traceId": enc(t.trace_id), "spanId": enc(s.span_id),
                                                                  "name": s.name}]}]}
        for t in traces for s in t.spans]}}


class Answer:
    def __init__(self, status, body):
        self.status_code = status
        self.text = body if isinstance(body, str) else json.dumps(body)

    def raise_for_status(self):
        if self.status_code >= 400:
            raise trace_feed.requests.HTTPError(f"HTTP {self.status_code}")


class FakeHttp:
    """Jaeger's services and search endpoints and Zipkin's collector."""

    def __init__(self, traces, services=("client", "envoy", "vllm", "jaeger")):
        self.traces = traces
        self.services = list(services)
        self.searched: list[list[str]] = []
        self.posted: list[list[dict]] = []
        self.refuse = False

    def get(self, url, params=None, timeout=None):
        if url.endswith("/api/v3/services"):
            self.searched.append([])
            return Answer(200, {"services": self.services})
        assert url.endswith("/api/v3/traces") and params["query.num_traces"]
        assert params["query.start_time_min"] < params["query.start_time_max"]
        self.searched[-1].append(params["query.service_name"])
        matching = [t for t in self.traces if params["query.service_name"] in t.services()]
        return Answer(200, v3_answer(matching)) if matching else Answer(404, {"error": {"httpCode": 404}})

    def post(self, url, data=None, headers=None, timeout=None):
        assert url.endswith("/api/v2/spans") and headers["Content-Type"] == "application/json"
        if self.refuse:
            return Answer(500, "busy")
        self.posted.append(json.loads(data))
        return Answer(202, "")


class FakeReader:
    """JaegerClient.get_trace over the same traces."""

    def __init__(self, http):
        self.http = http

    def get_trace(self, trace_id):
        return next((t for t in self.http.traces if t.trace_id == trace_id), None)


def feed_over(traces, **kw):
    feed = trace_feed.TraceFeed("http://jaeger", "http://zipkin", **kw)
    http = FakeHttp(traces)
    feed._http, feed._jaeger = http, FakeReader(http)
    return feed, http


def without(trace, name):
    """The trace as Jaeger held it before span ``name`` ended."""
    copy = rp.load_trace(DATA / f"{trace}.json")
    copy.spans[:] = [s for s in copy.spans if s.name != name]
    return copy


def test_each_span_is_posted_once_and_a_growing_trace_adds_only_its_new_spans():
    early = without("chat-ext_proc", "client.request")  # the root ends last
    feed, http = feed_over([early])
    assert feed.poll_once() == len(early.spans)
    assert feed.poll_once() == 0, "nothing new: nothing posted"
    full = rp.load_trace(DATA / "chat-ext_proc.json")
    http.traces = [full]
    assert feed.poll_once() == 1
    assert [s["name"] for s in http.posted[-1]] == ["client.request"]
    ids = [s["id"] for batch in http.posted for s in batch]
    assert sorted(ids) == sorted(s.span_id for s in full.spans), "every span, exactly once"
    assert feed.stats.spans_posted == len(full.spans) and feed.stats.traces_posted == 2


def test_spans_zipkin_refused_are_posted_again_next_round():
    feed, http = feed_over([rp.load_trace(DATA / "stream-direct.json")])
    http.refuse = True
    with pytest.raises(RuntimeError, match="Zipkin refused"):
        feed.poll_once()
    http.refuse = False
    assert feed.poll_once() == len(http.traces[0].spans)


def test_every_service_is_searched_now_and_then_and_the_edge_in_between():
    feed, http = feed_over([rp.load_trace(DATA / "chat-lua-callout.json")], full_every=3)
    for _ in range(4):
        feed.poll_once()
    assert http.searched == [["client", "envoy", "vllm"], ["client", "envoy"], ["client", "envoy"],
                             ["client", "envoy", "vllm"]], "Jaeger's own traces are never copied"


def test_traces_that_left_the_window_are_forgotten(monkeypatch):
    feed, http = feed_over([rp.load_trace(DATA / "stream-direct.json")], lookback_s=60)
    now = [1_000_000.0]
    monkeypatch.setattr(trace_feed.time, "time", lambda: now[0])
    feed.poll_once()
    assert len(feed._posted) == 1
    http.traces = []
    now[0] += 61
    feed.poll_once()
    assert feed._posted == {}


def test_span_ids_read_hex_and_base64():
    trace = rp.load_trace(DATA / "pd-dynmod-callout.json")
    expected = {trace.trace_id: {s.span_id for s in trace.spans}}
    assert trace_feed.span_ids(v3_answer([trace])) == expected
    assert trace_feed.span_ids(v3_answer([trace], base64_ids=True)) == expected
    assert trace_feed.span_ids({"result": {}}) == {}


def test_the_thread_keeps_going_when_jaeger_fails_and_stops_when_told():
    feed, http = feed_over([], interval_s=0.01)

    def broken(*a, **kw):
        raise trace_feed.requests.ConnectionError("refused")

    http.get = broken
    with feed:
        import time

        deadline = time.monotonic() + 5
        while feed.stats.errors < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert feed.stats.errors >= 3 and "refused" in feed.stats.last_error
    assert feed._thread is None
