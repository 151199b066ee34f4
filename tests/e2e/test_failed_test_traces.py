"""A failing test's traces, as its author meets them: the failure report names an HTML page of the test's
requests (written next to its testbed's logs) and, with --eppkit-ui, links each trace in the live UI.

Runs a whole pytest session with the kit's plugin over one deliberately failing test, on the runtime
under test, then opens the page it names in headless Chromium.
"""

import json
import re
import textwrap
from pathlib import Path

import pytest

from eppkit.pytest_plugin.state import require
from eppkit.ui import zipkin
from tests.support import chromium as _chromium
from tests.support.contract import CONTRACT
from tests.support.inner import run_pytest

pytestmark = pytest.mark.e2e

INNER = """
    import json, time
    import pytest
    import requests
    from eppkit.topology import Topology

    @pytest.mark.parametrize("n", range({count}))
    def test_fails_after_two_requests(eppkit_testbed_factory, eppkit_ui, n):
        bed = eppkit_testbed_factory(Topology(mode="ext_proc"))
        client = bed.client()
        results = [client.chat({{"model": "mock-llm", "max_tokens": 3, "messages": [{{"role": "user", "content": "hi"}}]}})
                   for _ in range(2)]
        traces = [bed.wait_for_trace(r) for r in results]
        seen = {{}}
        for trace in traces:  # what the live UI shows of each trace, a few seconds at most after Jaeger has it
            want, got = {{s.span_id for s in trace.spans}}, set()
            deadline = time.monotonic() + 5
            while eppkit_ui is not None and not want <= got and time.monotonic() < deadline:
                resp = requests.get(f"{{eppkit_ui.zipkin.url}}/zipkin/api/v2/trace/{{trace.trace_id}}")
                got = {{s["id"] for s in resp.json()}} if resp.status_code == 200 else set()
                time.sleep(0.1)
            seen[trace.trace_id] = {{"jaeger": sorted(want), "ui": sorted(got),
                                     "zipkin": eppkit_ui.zipkin.url}}
        open(f"{out}/seen-{{n}}.json", "w").write(json.dumps(seen))
        assert results[0].status == 599, "deliberately failing"
"""


def run_inner(tmp_path: Path, runtime: str, count: int, *args: str) -> str:
    """A session of its own over ``count`` deliberately failing tests, with the live UI; its report."""
    require(zipkin.find_jar() is not None, "Zipkin's server jar is not cached. Run `eppkit bootstrap --ui`.")
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER.format(out=str(tmp_path), count=count)))
    code, report = run_pytest(tmp_path, "--eppkit-runtime", runtime, "--eppkit-ui", *args,
                              str(tmp_path / "test_inner.py"))
    assert code == 1 and f"{count} failed" in report and "deliberately failing" in report, report
    assert "LEAK" not in report, report
    return report


def seen_in_ui(tmp_path: Path, report: str) -> dict:
    """Every inner test's traces: each span Jaeger has is in the live UI, and the report links each trace there."""
    seen = {}
    for path in sorted(tmp_path.glob("seen-*.json")):
        seen.update(json.loads(path.read_text()))
    for trace_id, spans in seen.items():
        assert spans["jaeger"] and set(spans["jaeger"]) <= set(spans["ui"]), f"the live UI lacks spans of {trace_id}"
        assert re.search(rf"live: {re.escape(spans['zipkin'])}/zipkin/traces/{trace_id}", report), report
    return seen


@CONTRACT  # the components' logs followed, the runtime's Jaeger feeding the live UI
def test_a_failed_test_names_its_trace_page_and_links_the_live_ui(tmp_path, eppkit_runtime):
    report = run_inner(tmp_path, eppkit_runtime, 1)
    assert re.search(r"eppkit: the \w+ Jaeger's traces, live: http://127\.0\.0\.1:\d+/zipkin/", report), report
    seen = seen_in_ui(tmp_path, report)

    section = report.split("eppkit traces (HTML, open in a browser)", 1)[1]
    page = Path(re.search(r"^(/\S+/failed-test_fails_after_two_requests[^/\s]*\.html)$", section, re.M).group(1))
    assert page.parent.parent == tmp_path / "runs", "next to the testbed's logs"
    assert (page.parent / "envoy.log").is_file()
    dom = _chromium.dump_dom(page.as_uri())
    drawn = re.findall(r'<details class="span[^"]*" data-span-id="([0-9a-f]+)"', dom)
    assert sorted(drawn) == sorted(i for spans in seen.values() for i in spans["jaeger"]), \
        "the page draws every span of both requests' traces"
    _chromium.screenshot(page.as_uri(), tmp_path / "failed-test.png")


def test_under_xdist_the_run_has_one_live_ui_that_every_worker_feeds(tmp_path):
    # Two failing tests on two workers: one URL printed by the controller, both workers' traces in that
    # one UI, each failure linking its traces there, and each testbed's folder named by its worker.
    report = run_inner(tmp_path, "local", 2, "-n", "2", "--dist", "load")
    urls = re.findall(r"eppkit: every worker's traces, live: (http://127\.0\.0\.1:\d+)/zipkin/", report)
    assert len(urls) == 1, report
    seen = seen_in_ui(tmp_path, report)
    assert len(seen) == 4 and {spans["zipkin"] for spans in seen.values()} == set(urls), seen
    pages = re.findall(r"^/\S+/(\d{8}-\d{6}-(gw\d)-ext_proc-aggregated[^/\s]*)/failed-\S+\.html$", report, re.M)
    assert {worker for _, worker in pages} == {"gw0", "gw1"}, report
