"""The HTML pages in a real browser (headless Chromium): the script runs, every span is in the waterfall,
a ``#span=`` link opens that span's details. Chromium is a process, so these are integration tests."""


import pytest
from eppkit.observability import html

from eppkit.compare import output
from eppkit.compare import report as rp
from tests.support import chromium as _chromium
from tests.support.report_samples import DATA, Page, many_modes, report_folder

pytestmark = pytest.mark.integration

SAVED = sorted(DATA.glob("*.json"))
# Written on <html> once the page has loaded: how wide the page is against its window, and which charts the page
# shows smaller than drawn (their text shrunk with them).
MEASURE = """<script>addEventListener("load", () => {
  const root = document.documentElement;
  root.dataset.scrollWidth = root.scrollWidth;
  root.dataset.clientWidth = root.clientWidth;
  root.dataset.shrunk = [...document.querySelectorAll("figure.chart img")]
    .filter(img => img.clientWidth < img.naturalWidth - 1).map(img => img.alt).join("; ");
  root.dataset.charts = document.querySelectorAll("figure.chart img").length;
});</script>"""


def dom(url: str) -> tuple[Page, dict[str, dict]]:
    """The page as Chromium left it once its script ran, and its spans by id."""
    page = Page(_chromium.dump_dom(url))
    return page, {attrs["data-span-id"]: attrs for attrs in page.spans}


def test_every_span_of_every_trace_is_in_the_rendered_waterfall_and_a_link_opens_one(tmp_path):
    traces = [rp.load_trace(p) for p in SAVED]
    page = html.write_trace_page(tmp_path / "traces.html", html.trace_views(traces), title="saved traces")
    target = traces[0].one("epp.pick", "epp")
    rendered, spans = dom(f"{page.as_uri()}#span={target.span_id}")
    assert rendered.root.get("data-ready") == "true", "the page's script ran"
    assert set(spans) == {s.span_id for t in traces for s in t.spans}
    opened = [i for i, a in spans.items() if "open" in a]
    assert opened == [target.span_id], "the link opened that span, and only it"
    assert "selected" in spans[target.span_id]["class"]
    _chromium.screenshot(f"{page.as_uri()}#span={target.span_id}", tmp_path / "traces.png")


def test_the_report_page_renders_its_waterfall_and_charts(tmp_path):
    report = report_folder(tmp_path)
    path = output.write(report, tmp_path)["html"]
    rendered, spans = dom(path.as_uri())
    assert rendered.root.get("data-ready") == "true"
    trace = rp.load_trace(tmp_path / "traces/chat-ext_proc-x.json")
    assert set(spans) == {s.span_id for s in trace.spans}
    assert len([u for u in rendered.urls if u.startswith("data:image/svg+xml;base64,")]) == 2
    _chromium.screenshot(path.as_uri(), tmp_path / "report.png")


@pytest.mark.parametrize("concurrencies", [(None,), (1, 8, 32)], ids=["nine runs", "a sweep"])
def test_the_report_page_fits_its_window_with_a_run_per_mode_and_floor(concurrencies, tmp_path):
    path = output.write(many_modes(concurrencies), tmp_path)["html"]
    measured = tmp_path / "measured.html"
    measured.write_text(path.read_text().replace("</body>", MEASURE + "</body>"))
    root = Page(_chromium.dump_dom(measured.as_uri())).root
    assert int(root["data-charts"]) >= 2
    assert int(root["data-scroll-width"]) <= int(root["data-client-width"]), "a wide table scrolls in its own box"
    assert root["data-shrunk"] == "", "each chart shown as drawn, its labels at their size"
    _chromium.screenshot(path.as_uri(), tmp_path / "report.png", height=5000)
