"""The HTML pages in a real browser (headless Chromium): the script runs, every span is in the waterfall,
a ``#span=`` link opens that span's details. Chromium is a process, so these are integration tests."""

from html.parser import HTMLParser
from pathlib import Path

import pytest

import _chromium
from eppkit.observability import html, report as rp
from test_html_pages import _report_folder

pytestmark = pytest.mark.integration

DATA = Path(__file__).parent / "data" / "traces"
SAVED = sorted(DATA.glob("*.json"))


class Dom(HTMLParser):
    """What the browser made of the page: spans, which are open, hidden or selected, and the root's state."""

    def __init__(self, text: str):
        super().__init__()
        self.spans: dict[str, dict] = {}
        self.root: dict = {}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "html":
            self.root = attrs
        if tag == "details" and "span" in (attrs.get("class") or "").split():
            self.spans[attrs["data-span-id"]] = attrs


def test_every_span_of_every_trace_is_in_the_rendered_waterfall_and_a_link_opens_one(tmp_path):
    traces = [rp.load_trace(p) for p in SAVED]
    page = html.write_trace_page(tmp_path / "traces.html", html.trace_views(traces), title="saved traces")
    target = traces[0].one("epp.pick", "epp")
    dom = Dom(_chromium.dump_dom(f"{page.as_uri()}#span={target.span_id}"))
    assert dom.root.get("data-ready") == "true", "the page's script ran"
    assert set(dom.spans) == {s.span_id for t in traces for s in t.spans}
    opened = [i for i, a in dom.spans.items() if "open" in a]
    assert opened == [target.span_id], "the link opened that span, and only it"
    assert "selected" in dom.spans[target.span_id]["class"]
    _chromium.screenshot(f"{page.as_uri()}#span={target.span_id}", tmp_path / "traces.png")


def test_the_report_page_renders_its_waterfall_and_charts(tmp_path):
    report = _report_folder(tmp_path)
    path = rp.write(report, tmp_path)["html"]
    dom_text = _chromium.dump_dom(path.as_uri())
    dom = Dom(dom_text)
    assert dom.root.get("data-ready") == "true"
    trace = rp.load_trace(tmp_path / "traces/chat-ext_proc-x.json")
    assert set(dom.spans) == {s.span_id for s in trace.spans}
    assert dom_text.count('src="data:image/svg+xml;base64,') == 2
    _chromium.screenshot(path.as_uri(), tmp_path / "report.png")
