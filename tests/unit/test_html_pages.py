"""The HTML pages: every span of a trace in its waterfall, with its details, and nothing fetched from anywhere.

Parsed with the standard library's HTML parser; what a browser makes of them (the script, the
layout) is checked in headless Chromium by tests/integration/test_pages_in_chromium.py.
"""

import copy
from pathlib import Path

import pytest
from eppkit.observability import html
from eppkit.observability.trace_model import Span, SpanEvent, Trace

from eppkit import modes
from eppkit.compare import output
from eppkit.compare import report as rp
from tests.support.report_samples import Page, report_folder

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "traces"
SAVED = sorted(DATA.glob("*.json"))


def roles(page: Page) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for attrs in page.spans:
        for cls in attrs["class"].split():
            if cls.startswith("role-"):
                out.setdefault(cls[5:], set()).add(attrs["data-span-id"])
    return out


@pytest.mark.parametrize("path", SAVED, ids=[p.stem for p in SAVED])
def test_a_trace_page_holds_every_span_once_in_tree_order(path):
    trace = rp.load_trace(path)
    page = Page(html.trace_page([trace], title="t"))
    ids = [attrs["data-span-id"] for attrs in page.spans]
    assert sorted(ids) == sorted(s.span_id for s in trace.spans)
    assert page.events == sum(len(s.events) for s in trace.spans), "a marker per span event"
    by_id = {s.span_id: s for s in trace.spans}
    for attrs in page.spans:  # each span's path is its ancestors' ids: what folding relies on
        chain = attrs["data-path"].split("/")
        assert chain[-1] == attrs["data-span-id"]
        span = by_id[chain[-1]]
        assert [a.span_id for a in span.ancestors()][::-1] == chain[:-1]
    seen: set[str] = set()
    for span_id in ids:  # a parent comes before its children
        parent = by_id[span_id].parent
        assert parent is None or parent.span_id in seen
        seen.add(span_id)


def test_the_decision_the_picker_call_and_the_upstream_are_highlighted_for_the_mode_the_page_is_given():
    ext_proc = rp.load_trace(DATA / "chat-ext_proc.json")
    found = roles(Page(html.trace_page([html.TraceView(ext_proc, mode=modes.get("ext_proc"))], title="t")))
    assert found["decision"] == {ext_proc.one("epp.pick", "epp").span_id}
    assert found["upstream"] == {s.span_id for s in ext_proc.spans if s.name.startswith("router ")}
    assert len(found["picker-call"]) == 1

    # In sidecar the frontend decides; the EPP's epp.pick only relays its answer.
    sidecar = rp.load_trace(DATA / "multimodal-sidecar.json")
    found = roles(Page(html.trace_page([html.TraceView(sidecar, mode=modes.get("sidecar"))], title="t")))
    assert found["decision"] == {sidecar.one("frontend.route", "frontend").span_id}

    direct = rp.load_trace(DATA / "stream-direct.json")
    found = roles(Page(html.trace_page([html.TraceView(direct, mode=modes.get("direct"))], title="t")))
    assert "decision" not in found and found["upstream"]
    # Given no mode, a page highlights only what every trace has: Envoy's upstream request.
    found = roles(Page(html.trace_page([ext_proc], title="t")))
    assert set(found) == {"upstream"}


def test_details_show_attributes_events_status_and_resource_escaped():
    root = Span("00000000000000a1", "ab" * 16, "client.request", "client", 1_000, 10_000,
                attributes={"note": "<script>alert(1)</script>", "http.response.status_code": 503},
                events=[SpanEvent("first_token", 4_000, {"index": 0})], resource={"service.instance.id": "c-1"},
                error=True)
    text = html.trace_page([Trace("ab" * 16, [root])], title="a <b> title")
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "a &lt;b&gt; title" in text
    for shown in ("first_token", "+3.000 ms", "service.instance.id", "c-1", "http.response.status_code", "503",
                  "ERROR", "error"):
        assert shown in text, shown


def test_a_page_needs_no_network():
    page = Page(html.trace_page([rp.load_trace(p) for p in SAVED], title="t"))
    assert "link" not in page.tags and not [u for u in page.urls if "://" in u], page.urls
    assert all(u.startswith("#span=") for u in page.urls)


def test_ticks_are_round_numbers_across_the_trace():
    assert html.ticks(244.1) == [(0.0, "0 ms"), (20.483, "50 ms"), (40.967, "100 ms"), (61.45, "150 ms"),
                                 (81.934, "200 ms")]
    assert [label for _, label in html.ticks(0.9)][:3] == ["0.0 ms", "0.2 ms", "0.4 ms"]
    assert html.ticks(0) == [(0.0, "0 ms")]


def test_an_empty_trace_renders():
    assert "This trace holds no span" in html.trace_page([Trace("ff" * 16, [])], title="t")


def test_a_service_keeps_its_colour_everywhere():
    assert html.service_color("vllm") == html.SERVICE_COLORS["vllm"]
    assert html.service_color("my-service") == html.service_color("my-service")


def test_the_report_page_holds_the_tables_the_charts_and_each_representative_waterfall(tmp_path):
    report = report_folder(tmp_path)
    paths = output.write(copy.deepcopy(report), tmp_path)
    text = paths["html"].read_text()
    assert paths["html"] == tmp_path / "report.html"
    page = Page(text)
    trace = rp.load_trace(tmp_path / "traces/chat-ext_proc-x.json")
    assert sorted(a["data-span-id"] for a in page.spans) == sorted(s.span_id for s in trace.spans)
    charts = [u for u in page.urls if u.startswith("data:image/svg+xml;base64,")]
    assert len(charts) == 2, "latency and steps charts, embedded"
    assert not [u for u in page.urls if "://" in u]
    for row in rp.summary_rows(report["scenarios"]["chat"]):
        assert all(cell.replace("<", "&lt;").replace(">", "&gt;") in text for cell in row), row
    assert "RuntimeError: &lt;boom&gt;" in text and "logs/chat-sidecar.log" in text
    assert "1 regression(s)" in text and "e2e.p50_ms" in text
    _, step_rows = rp.step_table(report["scenarios"]["chat"])
    assert all(row[0] in text for row in step_rows)


def test_the_report_page_without_charts(tmp_path):
    report = report_folder(tmp_path)
    page = Page(output.write(report, tmp_path, charts=False)["html"].read_text())
    assert not [u for u in page.urls if u.startswith("data:")]
